"""One drain call in progress: the conversation, its lease, the state this worker holds, and what it did."""

from __future__ import annotations

from dataclasses import dataclass

from worker.conversation.chat import State
from worker.conversation.resident import Resident
from worker.envelopes.inputs import ReplyRecord
from worker.service.heartbeat import Beat
from worker.store.answers import OutboxHead, Pause, Snapshot

Claimed = tuple[int, OutboxHead]
"""A delivery already started: the delivery token and the claimed outbox head."""

Written = tuple[bytes, ReplyRecord]
"""A reply a commit queued, as written to the outbox and as the record it was encoded from."""


@dataclass
class DrainRun:
    """One drain call (the drainer is shared by threads, so what a call knows lives here)."""

    cid: str
    token: int
    beat: Beat
    kept: tuple[str, Resident] | None = None  # the state this worker holds decoded, and its tag
    applied: int = 0
    replied: bool = False
    delivery: Claimed | None = None  # the delivery the last commit started, if it did
    reply: Written | None = None  # the reply the last commit queued, when it queued one (see handover)
    started: float = 0.0  # time.monotonic() when the drain took the lease
    compact: bool = False  # this drain has asked for a compaction already
    stored: bytes | None = None  # the blob the store holds for the snapshot being applied (an append goes onto it)
    # The pause as the drain's begin read it, with the id of the head input it was read for: the first turn point
    # uses it instead of a GET of its own (see :meth:`pause_for`).
    pause_seen: tuple[str, Pause | None] | None = None
    # The player's opt-out as the same begin read it, used the same way (see :meth:`opt_out_for`).
    opt_out_seen: tuple[str, bool] | None = None

    def pause_for(self, head_id: str) -> tuple[bool, Pause | None]:
        """The pause read with the snapshot of ``head_id`` (``(True, pause)``, once: a later turn point reads the
        pause again), or ``(False, None)`` when none was."""
        seen, self.pause_seen = self.pause_seen, None
        if seen is None or seen[0] != head_id:
            return False, None
        return True, seen[1]

    def opt_out_for(self, head_id: str) -> bool | None:
        """Whether the player had opted out, as the begin read it with the snapshot of ``head_id`` (once), or None
        when it was not read then."""
        seen, self.opt_out_seen = self.opt_out_seen, None
        return seen[1] if seen is not None and seen[0] == head_id else None

    def state_of(self, snap: Snapshot) -> State:
        """The snapshot's state: what this worker holds decoded when it is the stored one (same tag), else the
        blob."""
        if self.kept is not None and snap.tag and self.kept[0] == snap.tag:
            return self.kept[1]
        if snap.state is None and snap.tag:
            raise RuntimeError(f"the store withheld state {snap.tag} of {self.cid}, which this worker does not hold")
        return snap.state

    def stored_blob(self, snap: Snapshot) -> bytes | None:
        """The blob the store holds for ``snap`` (as :meth:`state_of`, never raising: None when unknown)."""
        if self.kept is not None and snap.tag and self.kept[0] == snap.tag:
            return self.kept[1].blob
        return snap.state
