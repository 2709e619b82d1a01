"""How the store frames what it keeps in lists and reads from streams: a mailbox or outbox entry is
``<id>\\n<payload>``; a stream id ``<ms>-<seq>`` is a position, and a position one sortable zset score."""

from __future__ import annotations

from worker.errors import StoreError
from worker.store.answers import OutboxHead
from worker.store.script_replies import ClaimReply


def split_entry(entry: bytes) -> tuple[str, bytes]:
    """``<id>\\n<payload>`` -> (id, payload)."""
    nl = entry.find(b"\n")
    if nl < 0:
        return entry.decode("utf-8", "replace"), b""
    return entry[:nl].decode("utf-8", "replace"), entry[nl + 1:]


def join_entry(entry_id: str, payload: bytes) -> bytes:
    """(id, payload) -> ``<id>\\n<payload>``; an id may not hold a newline."""
    if "\n" in entry_id:
        raise StoreError("entry ids must not contain newlines")
    return entry_id.encode() + b"\n" + payload


def split_all(entries: list[bytes]) -> tuple[tuple[str, bytes], ...]:
    """:func:`split_entry` of each entry, in order."""
    return tuple(split_entry(e) for e in entries)


def claimed_head(reply: ClaimReply) -> OutboxHead:
    """The outbox head a claim script answered with."""
    reply_id, payload = split_entry(reply.entry or b"")
    inbound = None if reply.inbound_ms is None else reply.inbound_ms / 1000
    return OutboxHead(payload, reply_id, reply.part, reply.crashed, inbound)


def stream_position(entry_id: bytes) -> tuple[int, int]:
    """A stream id ``<ms>-<seq>`` as ``(ms, seq)``."""
    ms, _, seq = entry_id.partition(b"-")
    return int(ms), int(seq or 0)


def position_score(entry_id: bytes) -> float:
    """A stream id as one sortable, exact zset score (``ms * 1000 + seq``, seq capped at 999)."""
    ms, seq = stream_position(entry_id)
    return float(ms * 1000 + min(seq, 999))


def score_position(score: float) -> tuple[int, int]:
    """The ``(ms, seq)`` a :func:`position_score` names."""
    ms, seq = divmod(int(score), 1000)
    return ms, seq
