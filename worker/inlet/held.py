"""What one stream inlet holds: its own pending entries it could not accept yet, by conversation, oldest first, in
the inlet's memory. A retry takes them from here, a conversation at a time and only where its mailbox has room, so
a retry costs what it retries, never a pass over every pending entry of the stream."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from worker.inlet.pending import entry_sid


@dataclass
class HeldEntries:
    """Entry ids by conversation; ``full``: the conversations whose mailbox was full when last tried."""

    by_conversation: dict[str, dict[bytes, None]] = field(default_factory=dict)
    full: set[str] = field(default_factory=set)

    def __len__(self) -> int:
        return sum(len(ids) for ids in self.by_conversation.values())

    def hold(self, conversation_id: str, entry_id: bytes, *, full: bool) -> None:
        """Hold ``entry_id``, its conversation's entries kept in stream order (an entry claimed from another inlet
        may be older than those held already: the retry applies them oldest first)."""
        ids = self.by_conversation.setdefault(conversation_id, {})
        if entry_id not in ids:
            out_of_order = bool(ids) and entry_sid(entry_id) < entry_sid(next(reversed(ids)))
            ids[entry_id] = None
            if out_of_order:
                self.by_conversation[conversation_id] = dict.fromkeys(sorted(ids, key=entry_sid))
        if full:
            self.full.add(conversation_id)

    def settled(self, conversation_id: str | None, entry_id: bytes) -> None:
        """``entry_id`` was accepted or moved aside: no longer held (its conversation's mailbox had room)."""
        if conversation_id is None:
            return
        self.full.discard(conversation_id)
        ids = self.by_conversation.get(conversation_id)
        if ids is not None:
            ids.pop(entry_id, None)
            if not ids:
                del self.by_conversation[conversation_id]

    def forget(self, entry_ids: Sequence[bytes]) -> None:
        """Drop ``entry_ids`` wherever held (trimmed from the stream: nothing left to accept)."""
        gone = set(entry_ids)
        for cid in list(self.by_conversation):
            ids = self.by_conversation[cid]
            for eid in gone.intersection(ids):
                del ids[eid]
            if not ids:
                del self.by_conversation[cid]
                self.full.discard(cid)

    def ids(self) -> list[bytes]:
        return [eid for ids in self.by_conversation.values() for eid in ids]

    def due(self, budget: int, has_room: Callable[[list[str]], list[bool]]) -> list[bytes]:
        """Up to ``budget`` held entry ids to try again: a conversation's oldest first, skipping the conversations
        whose mailbox is still full (``has_room`` answers for the conversations found full, in one call); those
        visited go to the back of the line, so a flood of one conversation never starves the others."""
        cids = list(self.by_conversation)
        full = [cid for cid in cids if cid in self.full]
        room = dict(zip(full, has_room(full), strict=True)) if full else {}
        out: list[bytes] = []
        for cid in cids:
            if len(out) >= budget:
                break
            if not room.get(cid, True):
                continue
            out.extend(itertools.islice(self.by_conversation[cid], budget - len(out)))
            self.by_conversation[cid] = self.by_conversation.pop(cid)  # to the back of the line
        return out
