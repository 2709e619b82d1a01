"""What the Lua scripts answer, each in one fixed shape parsed by position (never guessed from its length), and the
decoders of the values they hand back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple


def opt_bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def blob_bytes(value: Any) -> bytes | None:
    """A state blob as the scripts send it: its parts (a base and the frames appended to it, see
    include/stored_blob.lua) joined, a blob stored whole as it is, or None."""
    if value is None:
        return None
    if isinstance(value, list):
        return b"".join(value)
    return bytes(value)


def text_or_none(value: Any) -> str | None:
    return None if value is None else bytes(value).decode("utf-8", "replace")


class AcceptReply(NamedTuple):
    """ACCEPT: ``code`` 1 accepted, 0 a duplicate id, -1 the mailbox is full; ``depth`` after it; ``ended_hold``:
    it ended a burst's hold (a game event the model answers); ``woken``: it pushed the wake-up it was given."""

    code: int
    depth: int
    ended_hold: bool = False
    woken: bool = False

    @classmethod
    def parse(cls, res: Sequence[Any]) -> AcceptReply:
        return cls(int(res[0]), int(res[1]), int(res[2]) == 1, int(res[3]) == 1)


class BeginReply(NamedTuple):
    """BEGIN: ``code`` is the new lease token (> 0), 0 nothing waits, -1 busy, -2 held; then the head entry, the
    state blob and version, the attempts counted at the head and the entries after the head that were asked for
    (``peek``)."""

    code: int
    entry: bytes | None
    blob: bytes | None
    version: int
    attempts: int
    after: list[bytes]
    tag: str  # the stored state's tag ('' none); ``blob`` is None when it is the tag the caller has
    journal: bool  # the turn journal holds entries
    paused: bytes | None  # the conversation's paused key (see worker.store.pauses), None: not paused
    opted_out: bool  # the player opted out (see worker.store.identities)


class ClaimReply(NamedTuple):
    """A claim of the outbox head: ``code`` 1 (or a delivery token, when the claim started a delivery) with the
    head entry, its next part, whether that part was left in flight and when the player last wrote (ms, None when
    no message is known), read in the same step; 0 nothing to send; negative refused."""

    code: int
    entry: bytes | None
    part: int
    crashed: bool
    inbound_ms: int | None

    @classmethod
    def parse(cls, res: Sequence[Any]) -> ClaimReply:
        return cls(int(res[0]), opt_bytes(res[1]), int(res[2] or 0), int(res[3] or 0) == 1,
                   None if res[4] is None else int(res[4]))


class CommitReply(NamedTuple):
    """COMMIT: ``code`` is the new version (or a refusal), ``extra`` the depth left (or the current version on a
    refusal); then either ``released`` (with the delivery the commit started, if any) or the next input."""

    code: int
    extra: int
    released: bool
    next_entry: bytes | None
    next_attempts: int
    kept_blob: bytes | None
    delivery: ClaimReply
    after: list[bytes]  # the entries after the next input that were asked for (``peek``)
    tag: str  # the stored state's tag after the commit


class VersionReply(NamedTuple):
    """QUARANTINE: ``code`` is the new version or a refusal, ``version`` the version found on a refusal."""

    code: int
    version: int


class PaceReply(NamedTuple):
    """PACE: ``reserved`` when the send may go after ``wait_us`` (its slot is taken); else nothing was taken: the
    recipient must wait ``wait_us`` first, or the number's slot is further away than the caller would sleep. ``by``:
    the limit that set the wait (0 none, 1 the number, 2 the recipient)."""

    reserved: bool
    wait_us: int
    by: int


class RecordReply(NamedTuple):
    """RECORD_STEP: ``code`` 1 recorded, -1 the fence moved, -3 the input left the head, -4 the journal is full;
    ``entries`` in the journal after it."""

    code: int
    entries: int


class StatusReply(NamedTuple):
    """RECORD_STATUS: whether the message's status moved forward, the latest status kept for it, and whether the
    status was kept for the reply part it names because that part is still in flight."""

    moved: bool
    latest: str
    for_part: bool


class InflightReply(NamedTuple):
    """INFLIGHT_OUTCOME: ``code`` 1 with the status kept for the part in flight (or None), its provider message id
    and the ms since a deliverer first found it left in flight; 0 the part is not in flight; -1 / -3 refused."""

    code: int
    status: str | None
    provider_id: str | None
    waited_ms: int


class FireReply(NamedTuple):
    """FIRE_TIMERS: timers accepted into the mailbox, its depth before them, the earliest due ms still held (-1
    none; when ``full``, the time to look again), whether the mailbox was full, timers dropped as duplicates (or by
    a reset) and the (id, due ms) of each accepted, in order."""

    accepted: int
    depth_before: int
    earliest: int
    full: bool
    dropped: int
    fired: tuple[tuple[str, int], ...]
    ended_hold: bool = False  # a game event the model answers ended a burst's hold
