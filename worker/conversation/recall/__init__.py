"""Recall: what leaves a conversation's verbatim history is archived, and the model can search it.

Pure: archived messages and their bytes (:mod:`.codec`), search terms (:mod:`.terms`), the BM25 index
(:mod:`.index`), the archive protocol with an in-memory archive (:mod:`.archive`), and how a chat reads an archive:
the ``search_conversation`` tool and ``auto`` recall (:mod:`.reading`). Storing an archive in Redis is the store's
job.
"""

from worker.conversation.recall.archive import Archive, InMemoryArchive, Recalled, RecalledMessage, recall
from worker.conversation.recall.archived import SPEAKERS, ArchivedMessage, Speaker, stable_id
from worker.conversation.recall.codec import bound_newest, decode_archive, encode_batch, new_messages
from worker.conversation.recall.index import SearchIndex

__all__ = [
    "SPEAKERS", "Archive", "ArchivedMessage", "InMemoryArchive", "Recalled", "RecalledMessage", "SearchIndex",
    "Speaker", "bound_newest", "decode_archive", "encode_batch", "new_messages", "recall", "stable_id",
]
