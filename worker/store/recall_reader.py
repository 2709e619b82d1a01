"""Reading a conversation's archive from Redis: the search index segments of its ``recall_index`` list, searched
each and merged by score.

The archive's record is ``recall`` (codec batches, written by the commits that drop messages from the history);
each of those commits also appends one small index segment to ``recall_index``, and a merge off the turn replaces
many segments by one. The segments hold the messages' texts, times and speakers, so a search and the context around
its hits need nothing else. Decoding a segment costs far more than asking it, so a process keeps the decoded
segments of the conversations it served, by the list's length: a turn decodes only the segments appended since the
last, and a list that got shorter (merged) is read again whole.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from worker.conversation.recall.archive import Recalled, recall
from worker.conversation.recall.archived import ArchivedMessage
from worker.conversation.recall.index import SearchIndex
from worker.conversation.tokens import TokenCounter
from worker.store.keys import ConversationKeys

#: Conversations whose decoded segments a process keeps (least recently searched out first).
DEFAULT_CACHED_CONVERSATIONS = 64


@dataclass(frozen=True)
class Segments:
    """The decoded segments of one conversation's index, oldest first, read as one index: positions run on from one
    segment to the next, so the context of a hit may come from its neighbour."""

    indexes: tuple[SearchIndex, ...]

    def _starts(self) -> list[int]:
        starts, at = [], 0
        for index in self.indexes:
            starts.append(at)
            at += len(index)
        return starts

    def rank(self, query: str, limit: int) -> list[int]:
        """The best ``limit`` hits of all segments by BM25 score (lower first), as positions in the whole."""
        hits: list[tuple[float, int]] = []
        for start, index in zip(self._starts(), self.indexes, strict=True):
            hits.extend((score, start + position) for position, score in index.scored(query, limit))
        hits.sort()
        return [position for _, position in hits[:limit]]

    def messages(self, first: int, last: int) -> dict[int, ArchivedMessage]:
        found: dict[int, ArchivedMessage] = {}
        for start, index in zip(self._starts(), self.indexes, strict=True):
            end = start + len(index) - 1
            if end < first or start > last:
                continue
            for position, message in index.messages(max(first, start) - start, min(last, end) - start).items():
                found[start + position] = message
        return found


class RedisArchiveReader:
    """An :class:`~worker.conversation.recall.archive.Archive` that searches the archive the commits write to Redis.

    It only reads: messages reach the archive inside the commit that drops them from the history (a fenced script),
    never through :meth:`append`. ``client`` returns bytes (no ``decode_responses``). Thread-safe."""

    def __init__(self, client: Any, keys: Callable[[str], ConversationKeys], *, counter: TokenCounter | None = None,
                 cached_conversations: int = DEFAULT_CACHED_CONVERSATIONS) -> None:
        self._client = client
        self._keys = keys
        self._counter = counter
        self._cached = cached_conversations
        self._cache: OrderedDict[str, tuple[SearchIndex, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def append(self, conversation_id: str, messages: Sequence[ArchivedMessage]) -> list[ArchivedMessage]:
        raise NotImplementedError("the worker's archive is written by the commit that drops the messages")

    def erase(self, conversation_id: str) -> None:
        keys = self._keys(conversation_id)
        self._client.delete(keys.recall, keys.recall_index)
        with self._lock:
            self._cache.pop(conversation_id, None)

    def search(self, conversation_id: str, query: str, *, max_tokens: int) -> list[Recalled]:
        segments = self.segments(conversation_id)
        if not segments.indexes:
            return []
        # Searched outside the lock: a decoded segment is only read (SQLite serialises its own connection).
        return recall(segments, query, max_tokens=max_tokens, counter=self._counter)

    def segments(self, conversation_id: str) -> Segments:
        """The conversation's segments as they are now, decoding only those not decoded before."""
        key = self._keys(conversation_id).recall_index
        with self._lock:
            known = self._cache.get(conversation_id, ())
        pipe = self._client.pipeline(transaction=True)
        pipe.llen(key)
        pipe.lrange(key, len(known), -1)
        length, tail = pipe.execute()
        if length == len(known) + len(tail) and length >= len(known):
            decoded = known + tuple(SearchIndex.from_bytes(bytes(b)) for b in tail)
        else:  # the list was merged (or erased) since: read it whole
            decoded = tuple(SearchIndex.from_bytes(bytes(b)) for b in self._client.lrange(key, 0, -1))
        with self._lock:
            if decoded:
                self._cache[conversation_id] = decoded
                self._cache.move_to_end(conversation_id)
                while len(self._cache) > self._cached:
                    self._cache.popitem(last=False)
            else:
                self._cache.pop(conversation_id, None)
        return Segments(decoded)
