"""The stream inlet's pending index: which conversation each pending entry of the group belongs to, kept in Redis
beside the stream (:class:`~worker.store.keys.InletKeys`), so that an inlet asks about its batch's conversations
only (held.lua) instead of decoding every pending entry of the stream on every batch.

An entry joins the index in the step that hands it to an inlet (read.lua: the read and the note are one script), and
leaves it with its acknowledgement (one transaction). A member whose entry is no longer pending is removed when a
look-up meets it, so a crash or an inlet of an older release can leave no entry waiting on a ghost.
"""

from __future__ import annotations

import importlib.resources
import json
from collections.abc import Iterable
from typing import Any

import redis

from worker.store import lua
from worker.store.keys import InletKeys

Entry = tuple[bytes, dict[bytes, bytes] | None]
"""A stream entry as XREADGROUP answers it: its id and fields (None: a pending entry trimmed away)."""


def entry_sid(entry_id: bytes | str) -> tuple[int, int]:
    """An entry id as a pair of numbers, for order."""
    ms, _, seq = (entry_id.decode() if isinstance(entry_id, bytes) else entry_id).partition("-")
    return int(ms), int(seq or 0)


def member(conversation_id: str, entry_id: bytes | str) -> bytes:
    """The index member of an entry (what read.lua writes: include/inlet_member.lua)."""
    ms, seq = entry_sid(entry_id)
    return f"{conversation_id}\0{ms:020d}-{seq:020d}".encode()


def conversation_of(envelope: bytes | None) -> str | None:
    """The conversation id an entry's JSON names, as read.lua sees it (None when it names none)."""
    try:
        obj: Any = json.loads(envelope or b"")
    except (ValueError, RecursionError):
        return None
    cid = obj.get("conversation_id") if isinstance(obj, dict) else None
    return cid if isinstance(cid, str) and "\0" not in cid else None


def _script(r: redis.Redis, name: str) -> Any:
    source = importlib.resources.files("worker.inlet").joinpath(f"{name}.lua").read_text()
    return r.register_script(lua.resolve(source))  # its ``--! include`` lines: the store's fragments


class PendingIndex:
    """The index of one stream and group, and the scripts that read it."""

    def __init__(self, r: redis.Redis, stream: str, group: str) -> None:
        self.r, self.group, self.keys = r, group, InletKeys(stream)
        self._read, self._held = _script(r, "read"), _script(r, "held")

    def read(self, consumer: str, start: str | bytes, count: int) -> tuple[bytes, list[Entry]]:
        """Up to ``count`` entries for ``consumer`` (``start`` '>': new ones; an id: its own pending ones after it),
        noted in the index; and the stream's newest entry id (to wait for a newer one)."""
        newest, entries = self._read(keys=[self.keys.stream, self.keys.pending],
                                     args=[self.group, consumer, count, start])
        return bytes(newest), [(bytes(eid), _fields(fields)) for eid, fields in entries]

    def note(self, entries: Iterable[tuple[str, bytes]]) -> None:
        """Note ``(conversation id, entry id)`` pairs an inlet took otherwise (claimed from another consumer): an
        entry read before the index existed joins it."""
        members = {member(cid, eid): 0 for cid, eid in entries}
        if members:
            self.r.zadd(self.keys.pending, members, nx=True)  # type: ignore[arg-type]

    def older_pending(self, batch: list[tuple[str, bytes]]) -> dict[str, tuple[int, int]]:
        """For the batch's ``(conversation id, entry id)`` pairs: each conversation with an entry pending outside the
        batch, older than some of the batch's, and that entry's id (the batch's entries of it after that wait)."""
        if not batch:
            return {}
        out = self._held(keys=[self.keys.stream, self.keys.pending],
                         args=[self.group, *(x for cid, eid in batch for x in (cid, eid))])
        return {bytes(out[i]).decode(): entry_sid(out[i + 1]) for i in range(0, len(out) - 1, 2)}

    def settle(self, pipe: Any, entries: Iterable[tuple[str | None, bytes]]) -> None:
        """Queue on ``pipe`` (a transaction) the acknowledgement of ``entries``, their leaving the index, and their
        deletion from the stream: an acknowledged entry is done with (its input is in the mailbox, or its text in the
        dead letters), and a player's words must not outlive a delete in the inlet's stream. Only acknowledged
        entries go, so nothing unread is ever dropped (where ``XTRIM MINID`` could pass one still pending)."""
        entries = list(entries)
        ids = [eid for _, eid in entries]
        pipe.xack(self.keys.stream, self.group, *ids)
        pipe.xdel(self.keys.stream, *ids)
        members = [member(cid, eid) for cid, eid in entries if cid is not None]
        if members:
            pipe.zrem(self.keys.pending, *members)


def _fields(fields: Any) -> dict[bytes, bytes] | None:
    """A Lua reply's flat field list as XREADGROUP's dict (None: the entry was trimmed away)."""
    if not fields:
        return None
    return {bytes(fields[i]): bytes(fields[i + 1]) for i in range(0, len(fields) - 1, 2)}
