"""What the Lua scripts are sent: the positional protocols of the long scripts, named, the durable record a script
appends to, and ACCEPT's KEYS and ARGV (shared by the blocking store and the event loop's accept)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from worker.store.answers import WakePush
from worker.store.keys import ConversationKeys

# The positional protocols of the long scripts, named: each tuple's fields are the script's KEYS or ARGV in the order
# its header binds them (tests/store/test_lua_files.py holds every tuple of SIGNATURES to its file's header), and a
# tuple is sent as it is. A list of variable length (the burst's ids, the keys set to expire) follows after it.


class AcceptArgs(NamedTuple):
    id: str
    entry: bytes
    now_ms: int
    max_inbox: int
    dedupe_max: int
    dedupe_ms: int
    ttl_ms: int
    pending_member: str
    inbound_flag: str
    ends_burst_flag: str
    wake_message: bytes
    wake_every_flag: str
    reset_flag: str


class BeginKeys(NamedTuple):
    hold: str
    inbox: str
    lease: str
    fence: str
    state: str
    attempts: str
    journal: str
    blob_key: str
    paused: str
    opt_out: str


class CommitKeys(NamedTuple):
    fence: str
    state: str
    inbox: str
    attempts: str
    outbox: str
    trace: str
    dead: str
    lease: str
    dlease: str
    dfence: str
    sent: str
    journal: str
    record_stream: str
    record_dropped: str
    usage: str
    inbound: str
    blob_key: str
    recall: str
    recall_index: str


class CommitArgs(NamedTuple):
    token: int
    expected_version: int
    input_id: str
    mode: str
    blob: bytes
    reply_entry: bytes
    trace_entry: bytes
    dead_entry: bytes
    lease_ms: int
    trace_max: int
    dead_max: int
    ttl_ms: int
    claim_ms: str
    peek: int
    record_entry: bytes
    record_max: int
    usage_day: str
    tokens: int
    append_at: int
    cut_at: int
    recall_batch: bytes
    recall_segment: bytes
    recall_max_bytes: int
    recall_erase: str


class SentLastKeys(NamedTuple):
    dfence: str
    outbox: str
    sent: str
    delivered: str
    dlease: str
    record_stream: str
    record_dropped: str
    inbound: str


class SentLastArgs(NamedTuple):
    token: int
    reply_id: str
    provider_id: str
    delivered_max: int
    lease_ms: int
    record_entry: bytes
    record_max: int


class DeadReplyKeys(NamedTuple):
    dfence: str
    outbox: str
    sent: str
    dead: str
    record_stream: str
    record_dropped: str


class DeadReplyArgs(NamedTuple):
    token: int
    reply_id: str
    dead_entry: bytes
    dead_max: int
    record_entry: bytes
    record_max: int


class RecordStatusKeys(NamedTuple):
    statuses: str
    statusorder: str
    sent: str
    record_stream: str
    record_dropped: str


class RecordStatusArgs(NamedTuple):
    provider_id: str
    status: str
    detail: str
    max_kept: int
    reply_id: str
    part: int
    record_entry: bytes
    record_max: int


class DeleteArgs(NamedTuple):
    now_ms: int
    tomb_ms: int
    tomb_max: int
    record_id: str
    record_entry: bytes
    record_max: int


class PaceArgs(NamedTuple):
    number_interval_us: int
    number_tolerance_us: int
    recipient_interval_us: int
    recipient_tolerance_us: int
    max_wait_us: int


class FireKeys(NamedTuple):
    timers: str
    timed: str
    inbox: str
    seen: str
    tomb: str
    inbound: str
    hold: str


class FireArgs(NamedTuple):
    now_ms: int
    max_inbox: int
    dedupe_max: int
    dedupe_ms: int
    ttl_ms: int
    batch: int
    index_member: str
    retry_ms: int


# script -> (its KEYS tuple, its ARGV tuple); None where the wrapper's list is short enough to read at a glance.
SIGNATURES: dict[str, tuple[type[tuple[Any, ...]] | None, type[tuple[Any, ...]] | None]] = {
    "accept": (None, AcceptArgs),
    "begin": (BeginKeys, None),
    "commit": (CommitKeys, CommitArgs),
    "sent_last_claim_next": (SentLastKeys, SentLastArgs),
    "dead_reply": (DeadReplyKeys, DeadReplyArgs),
    "record_status": (RecordStatusKeys, RecordStatusArgs),
    "delete_keeping_tombstone": (None, DeleteArgs),
    "pace": (None, PaceArgs),
    "fire_timers": (FireKeys, FireArgs),
}


@dataclass(frozen=True)
class RecordArgs:
    """Where a script appends the durable record of what it did, and that record: ``entry`` empty or ``max`` 0
    means the record is off (no database configured) and nothing is appended."""

    stream: str
    dropped: str
    max: int = 0
    entry: bytes = b""


@dataclass(frozen=True)
class ArchiveWrite:
    """What a commit writes to the conversation's archive: one codec batch of the messages it takes out of the
    history and that batch's search index segment (both empty: none), after erasing the archive with ``erase`` (a
    reset phrase, a reset with ``forget``)."""

    batch: bytes = b""
    segment: bytes = b""
    erase: bool = False
    messages: int = 0  # how many the batch holds (for the trace and the metrics)

    def __post_init__(self) -> None:
        if bool(self.batch) != bool(self.segment):
            raise ValueError("an archive batch goes with its index segment")


NO_ARCHIVE = ArchiveWrite()


def accept_call(*, keys: ConversationKeys, pending: str | None, ttl_keys: list[str], input_id: str, entry: bytes,
                now_ms: int, max_inbox: int, dedupe_max: int, dedupe_ms: int, ttl_ms: int,
                inbound: bool, ends_burst: bool = False, wake: WakePush | None = None,
                reset: bool = False) -> tuple[list[str], AcceptArgs]:
    """ACCEPT's KEYS and ARGV, shared by the blocking store and the event loop's accept
    (:mod:`worker.store.async_mailbox`). ``pending`` is the sweeper's zset when it may be touched in the same script
    (not on a Cluster); ``inbound``: the input is a message the player sent (its time opens the customer-service
    window); ``ends_burst``: a game event the model answers, a reset or a person's message (accepted, it ends a burst's
    hold); ``wake``: the wake-up the script pushes itself when the input needs one (the broker is this Redis; never on
    a Cluster, where the queue is in another slot); ``reset``: a reset sent at once (accepted, it drops the
    conversation's timers, whose keys share its hash tag: on a Cluster too). The script answers
    :class:`AcceptReply`."""
    script_keys = [keys.inbox, keys.seen, keys.tomb, keys.inbound, keys.hold, keys.lastmsg,
                   *([pending] if pending else []),
                   *([wake.queue] if wake else []),
                   *([keys.timers, keys.timed] if reset else []),
                   *ttl_keys]
    return script_keys, AcceptArgs(input_id, entry, now_ms, max_inbox, dedupe_max, dedupe_ms, ttl_ms,
                                   pending_member=keys.cid if pending else "", inbound_flag="1" if inbound else "",
                                   ends_burst_flag="1" if ends_burst else "",
                                   wake_message=wake.message if wake else b"",
                                   wake_every_flag="1" if wake and wake.every else "",
                                   reset_flag="1" if reset else "")
