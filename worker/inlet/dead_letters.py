"""The stream inlet's dead letters (``<stream>:dead``): listed, and replayed into the stream once the producer's
mistake is fixed on Parley's side (a limit raised, a kind added). A letter of a conversation deleted after it was
written is never replayed: the delete's tombstone (:attr:`~worker.store.keys.ConversationKeys.tomb`) says when the
conversation was deleted, and a deleted player's words do not come back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from worker.errors import InputError, ReplayRefusedError
from worker.inlet.pending import conversation_of, entry_sid
from worker.store.keys import InletKeys
from worker.store.redis_store import ConversationStore

FIELD = b"envelope"


@dataclass(frozen=True)
class InletDeadLetter:
    """One letter: its id in ``<stream>:dead``, the id the entry had in the stream, why, and the entry's JSON."""

    id: str
    entry_id: str
    reason: str
    conversation_id: str | None
    envelope: bytes


def _letter(dead_id: bytes, fields: dict[bytes, bytes]) -> InletDeadLetter:
    envelope = fields.get(FIELD, b"")
    return InletDeadLetter(dead_id.decode(), fields.get(b"entry_id", b"").decode(),
                           fields.get(b"reason", b"").decode("utf-8", "replace"), conversation_of(envelope), envelope)


def dead_letters(r: redis.Redis, stream: str, count: int = 1000) -> list[InletDeadLetter]:
    """The oldest ``count`` letters."""
    got: Any = r.xrange(InletKeys(stream).dead, count=count)
    return [_letter(eid, fields) for eid, fields in got]


def deleted_after(store: ConversationStore, conversation_id: str, entry_id: str) -> bool:
    """Whether the conversation was deleted after the entry ``entry_id`` was written: its tombstone's newest delete
    is not older than the entry (a stream id starts with its ms)."""
    deleted = store.deleted_at_ms(conversation_id)
    return deleted is not None and deleted >= entry_sid(entry_id)[0]


def replay(r: redis.Redis, stream: str, dead_id: str, store: ConversationStore) -> str:
    """Put the letter ``dead_id`` back at the end of the stream (its JSON as it was) and drop it from the dead letters,
    in one transaction; returns the new entry's id. Raises :class:`~worker.errors.ReplayRefusedError` when the
    letter is gone or its conversation was deleted after it."""
    keys = InletKeys(stream)
    got: Any = r.xrange(keys.dead, dead_id, dead_id)
    if not got:
        raise ReplayRefusedError(f"no dead letter {dead_id} in {keys.dead}")
    letter = _letter(*got[0])
    cid = letter.conversation_id
    try:
        deleted = cid is not None and deleted_after(store, cid, letter.entry_id or letter.id)
    except InputError:  # not a conversation id at all: no conversation to have been deleted
        deleted = False
    if deleted:
        raise ReplayRefusedError(f"dead letter {dead_id}: conversation {cid} was deleted after it; not replayed")
    pipe = r.pipeline(transaction=True)
    pipe.xadd(stream, {FIELD: letter.envelope})
    pipe.xdel(keys.dead, dead_id)
    new_id, _ = pipe.execute()
    return bytes(new_id).decode()
