"""What a commit writes to the conversation's archive: the messages it takes out of the verbatim history, as one
codec batch and that batch's search index segment (see :mod:`worker.conversation.recall`), or the archive erased.

The batch goes in the very commit that lands the removal (the turn's, an event's, a splice's), so a crash never
loses it and a refused commit (a stale splice, a fenced-out worker) writes none; a batch larger than the archive's
bound keeps its newest messages.
"""

from __future__ import annotations

from collections.abc import Sequence

from worker.conversation.messages import Message
from worker.conversation.recall.archived import ArchivedMessage
from worker.conversation.recall.codec import bound_newest, encode_batch
from worker.conversation.recall.index import SearchIndex
from worker.conversation.recall.leaving import archived
from worker.store.script_args import NO_ARCHIVE, ArchiveWrite


def archive_write(cid: str, departed: Sequence[Message], *, erase: bool = False, on: bool = True,
                  max_bytes: int = 0) -> ArchiveWrite:
    """:func:`archive_of` without the messages."""
    return archive_of(cid, departed, erase=erase, on=on, max_bytes=max_bytes)[0]


def archive_of(cid: str, departed: Sequence[Message], *, erase: bool = False, on: bool = True,
               max_bytes: int = 0) -> tuple[ArchiveWrite, list[ArchivedMessage]]:
    """The archive write of a commit of ``cid`` that takes ``departed`` out of the history (``erase``: the archive is
    erased first, and what left is forgotten with it). ``on`` false (recall off): nothing is archived, an erase
    still erases."""
    messages = archived(cid, departed) if on and not erase else []
    if not messages:
        return (ArchiveWrite(erase=True) if erase else NO_ARCHIVE), []
    batch = encode_batch(messages)
    if max_bytes and len(batch) > max_bytes:
        messages = bound_newest(messages, max_bytes)
        if not messages:
            return NO_ARCHIVE, []
        batch = encode_batch(messages)
    return ArchiveWrite(batch=batch, segment=SearchIndex.of(messages).to_bytes(), messages=len(messages)), messages


def record_rows(messages: Sequence[ArchivedMessage]) -> list[tuple[str, str, str, float | None]]:
    """``messages`` as the durable record's entry carries them: ``[id, speaker, text, at]`` (``at`` in seconds)."""
    return [(m.id, m.speaker, m.text, None if m.at is None else m.at.timestamp()) for m in messages]


def archived_trace(write: ArchiveWrite) -> dict[str, int | bool]:
    """What the commit's trace entry says of the archive: the batch's bytes, or that it was erased."""
    out: dict[str, int | bool] = {}
    if write.batch:
        out["archived"] = write.messages
        out["archived_bytes"] = len(write.batch)
    if write.erase:
        out["archive_erased"] = True
    return out
