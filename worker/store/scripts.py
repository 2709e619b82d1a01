"""One Python wrapper per Lua script of :mod:`worker.store.lua` (the files of worker/store/lua/).

The wrappers are the only place that knows a script's KEYS order, ARGV order and result layout: callers pass
named arguments and get a typed result back, so adding an argument cannot silently shift the others, and a result
is parsed by position in one fixed shape rather than guessed from its length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from worker.store import lua
from worker.store.answers import WakePush
from worker.store.fast_scripts import register
from worker.store.keys import ConversationKeys, PaceKeys
from worker.store.replication import Replication


def _opt(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def _blob(value: Any) -> bytes | None:
    """A state blob as the scripts send it: its parts (a base and the frames appended to it, see
    include/stored_blob.lua) joined, a blob in the older layout (whole, in the state hash) as it is, or None."""
    if value is None:
        return None
    if isinstance(value, list):
        return b"".join(value)
    return bytes(value)


def _text(value: Any) -> str | None:
    return None if value is None else bytes(value).decode("utf-8", "replace")


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
        return cls(int(res[0]), _opt(res[1]), int(res[2] or 0), int(res[3] or 0) == 1,
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


class Scripts:
    """The registered scripts of one client, shared by every part of the store."""

    def __init__(self, client: Any, replication: Replication | None = None) -> None:
        self._client = client
        self._replication = replication or Replication()

        def load(text: str) -> Any:
            return register(client, text)

        self._accept, self._begin, self._commit = load(lua.ACCEPT), load(lua.BEGIN), load(lua.COMMIT)
        self._release, self._renew, self._retry = load(lua.RELEASE), load(lua.RENEW_LEASE), load(lua.NOTE_RETRY)
        self._quarantine = load(lua.QUARANTINE)
        self._mark_inflight, self._clear_inflight = load(lua.MARK_INFLIGHT), load(lua.CLEAR_INFLIGHT)
        self._mark_sent, self._dead_reply = load(lua.MARK_SENT), load(lua.DEAD_REPLY)
        self._begin_delivery, self._claim_next = load(lua.BEGIN_DELIVERY), load(lua.CLAIM_NEXT)
        self._sent_last = load(lua.SENT_LAST_CLAIM_NEXT)
        self._failure = load(lua.NOTE_DELIVERY_FAILURE)
        self._replay, self._zrem_if = load(lua.REPLAY), load(lua.ZREM_IF_SCORE)
        self._delete = load(lua.DELETE_KEEPING_TOMBSTONE)
        self._record_step = load(lua.RECORD_STEP)
        self._defer = load(lua.DEFER)
        self._record_status = load(lua.RECORD_STATUS)
        self._inflight_outcome = load(lua.INFLIGHT_OUTCOME)
        self._pace = load(lua.PACE)
        self._schedule, self._cancel_timer = load(lua.SCHEDULE), load(lua.CANCEL_TIMER)
        self._fire_timers, self._set_if_score = load(lua.FIRE_TIMERS), load(lua.SET_IF_SCORE)
        self._keep_context = load(lua.KEEP_CONTEXT)
        self._read_state = load(lua.READ_STATE)

    # --- mailbox -----------------------------------------------------------------------------------

    @property
    def replication(self) -> Replication:
        """How writes wait for replicas (the event loop's accept waits the same way)."""
        return self._replication

    def accept_in(self, *, pipe: Any, keys: list[str], args: AcceptArgs) -> None:
        """Queue ACCEPT (:func:`accept_call`'s KEYS and ARGV) on a pipeline; run it with
        :meth:`Replication.execute`."""
        self._accept(keys=keys, args=args, client=pipe)

    def accept(self, *, keys: list[str], args: AcceptArgs) -> AcceptReply:
        """ACCEPT with :func:`accept_call`'s KEYS and ARGV."""
        return AcceptReply.parse(self._replication.call(self._client, self._accept, keys=keys, args=args,
                                                        what="accept"))

    def begin(self, *, keys: ConversationKeys, lease_ms: int, peek: int = 0, held_tag: str = "") -> BeginReply:
        """``held_tag``: the tag of the state the caller holds decoded ('' none); that blob is not sent again."""
        res = self._begin(keys=BeginKeys(keys.hold, keys.inbox, keys.lease, keys.fence, keys.state, keys.attempts,
                                         keys.journal, keys.blob, keys.paused),
                          args=[lease_ms, peek, held_tag])
        return BeginReply(int(res[0]), _opt(res[1]), _blob(res[2]), int(res[3] or 0), int(res[4] or 0),
                          [bytes(e) for e in res[5] or ()], _text(res[6]) or "", int(res[7] or 0) == 1,
                          _opt(res[8]))

    def commit(self, *, keys: ConversationKeys, token: int, expected_version: int, input_id: str,
               mode: str, blob: bytes, reply_entry: bytes, trace_entry: bytes, dead_entry: bytes, lease_ms: int,
               trace_max: int, dead_max: int, ttl_ms: int, claim_ms: int, record: RecordArgs, peek: int = 0,
               burst_ids: Sequence[str] = (), usage_day: str = "", tokens: int = 0,
               append_at: int = 0, cut_at: int = 0) -> CommitReply:
        """``burst_ids``: the ids of the inputs after the head that the same turn applied (a burst), in mailbox
        order; ``append_at``: with mode ``append``, the length of the stored blob ``blob`` is appended to;
        ``cut_at`` (0: ``append_at``): where ``blob`` goes instead, the stored bytes after it dropped (a fold)."""
        res = self._replication.call(
            self._client, self._commit, what="commit",
            keys=CommitKeys(keys.fence, keys.state, keys.inbox, keys.attempts, keys.outbox, keys.trace, keys.dead,
                            keys.lease, keys.dlease, keys.dfence, keys.sent, keys.journal, record.stream,
                            record.dropped, keys.usage, keys.inbound, keys.blob),
            args=(*CommitArgs(token, expected_version, input_id, mode, blob, reply_entry, trace_entry, dead_entry,
                              lease_ms, trace_max, dead_max, ttl_ms, str(claim_ms) if claim_ms > 0 else "", peek,
                              record.entry, record.max, usage_day if tokens > 0 else "", tokens, append_at,
                              cut_at or append_at),
                  *burst_ids))
        return CommitReply(int(res[0]), int(res[1]), int(res[2]) == 1, _opt(res[3]), int(res[4] or 0),
                           _blob(res[5]), ClaimReply.parse([*res[6:10], res[12]]), [bytes(e) for e in res[10] or ()],
                           _text(res[11]) or "")

    def defer(self, *, keys: ConversationKeys, token: int, input_id: str, hold_ms: int) -> bool:
        """False when the fence moved (nothing changed). ``hold_ms`` 0 holds nothing (a hand-back)."""
        return int(self._defer(keys=[keys.fence, keys.lease, keys.attempts, keys.hold],
                               args=[token, input_id, max(0, hold_ms)])) == 1

    def release(self, *, fence: str, lease: str, token: int) -> bool:
        """Used for both leases: (fence, lease) or (dfence, dlease). True when the lease was ours and is gone."""
        return int(self._release(keys=[fence, lease], args=[token])) == 1

    def keep_context(self, *, fence: str, context: str, token: int, entry: bytes, ttl_ms: int) -> bool:
        """The game's last good live context, written only while ``token`` holds the fence."""
        return int(self._keep_context(keys=[fence, context], args=[token, entry, ttl_ms])) == 1

    def renew_lease(self, *, fence: str, lease: str, token: int, lease_ms: int) -> bool:
        """Shared by the drain lease (fence, lease) and the delivery lease (dfence, dlease)."""
        return int(self._renew(keys=[fence, lease], args=[token, lease_ms])) == 1

    def note_retry(self, *, keys: ConversationKeys, token: int, input_id: str, counter: str = "retries") -> int:
        """The retries counted so far on ``counter`` ("retries" or "bad"), or -1 when the fence moved."""
        return int(self._retry(keys=[keys.fence, keys.attempts], args=[token, input_id, counter]))

    def quarantine(self, *, keys: ConversationKeys, token: int, expected_version: int, record: bytes,
                   max_kept: int) -> VersionReply:
        code, version = self._quarantine(keys=[keys.fence, keys.state, keys.quarantine, keys.blob],
                                         args=[token, expected_version, record, max_kept])
        return VersionReply(int(code), int(version))

    def read_state(self, *, keys: ConversationKeys) -> tuple[bytes | None, int]:
        """The state blob (None: no state) and version, read together."""
        blob, version, _ = self._read_state(keys=[keys.state, keys.blob], args=[""])
        return _blob(blob), int(version or 0)

    def record_step(self, *, keys: ConversationKeys, token: int, input_id: str, field: str, entry: bytes,
                    max_entries: int, ttl_ms: int) -> RecordReply:
        code, entries = self._record_step(keys=[keys.fence, keys.inbox, keys.journal],
                                          args=[token, input_id, field, entry, max_entries, ttl_ms])
        return RecordReply(int(code), int(entries))

    # --- outbox ------------------------------------------------------------------------------------

    # The claims and the marks around a send wait for the replicas like the accept and the commit: a claim lost in a
    # failover would let the next deliverer send the part again without knowing it was in flight (a resend nobody
    # counts), and a lost sent mark would resend a part the player has.

    def begin_delivery(self, *, keys: ConversationKeys, lease_ms: int) -> ClaimReply:
        return ClaimReply.parse(self._replication.call(
            self._client, self._begin_delivery, keys=[keys.dlease, keys.dfence, keys.outbox, keys.sent, keys.inbound],
            args=[lease_ms], what="claim"))

    def claim_next(self, *, keys: ConversationKeys, token: int, lease_ms: int) -> ClaimReply:
        return ClaimReply.parse(self._replication.call(
            self._client, self._claim_next, keys=[keys.dfence, keys.outbox, keys.sent, keys.dlease, keys.inbound],
            args=[token, lease_ms], what="claim"))

    def sent_last_claim_next(self, *, keys: ConversationKeys, token: int, reply_id: str, provider_id: str,
                             delivered_max: int, lease_ms: int, record: RecordArgs) -> ClaimReply:
        return ClaimReply.parse(self._replication.call(
            self._client, self._sent_last, what="sent",
            keys=SentLastKeys(keys.dfence, keys.outbox, keys.sent, keys.delivered, keys.dlease, record.stream,
                              record.dropped,
                              keys.inbound),
            args=SentLastArgs(token, reply_id, provider_id, delivered_max, lease_ms, record.entry, record.max)))

    def mark_inflight(self, *, keys: ConversationKeys, token: int, reply_id: str, part: int) -> int:
        return int(self._replication.call(self._client, self._mark_inflight, keys=[keys.dfence, keys.sent],
                                          args=[token, reply_id, part], what="claim"))

    def clear_inflight(self, *, keys: ConversationKeys, token: int) -> int:
        return int(self._clear_inflight(keys=[keys.dfence, keys.sent], args=[token]))

    def mark_sent(self, *, keys: ConversationKeys, token: int, reply_id: str, part: int, provider_id: str,
                  lease_ms: int) -> int:
        return int(self._replication.call(self._client, self._mark_sent,
                                          keys=[keys.dfence, keys.outbox, keys.sent, keys.dlease],
                                          args=[token, reply_id, part, provider_id, lease_ms], what="sent"))

    def dead_reply(self, *, keys: ConversationKeys, token: int, reply_id: str, dead_entry: bytes, dead_max: int,
                   record: RecordArgs) -> int:
        return int(self._dead_reply(
            keys=DeadReplyKeys(keys.dfence, keys.outbox, keys.sent, keys.dead, record.stream, record.dropped),
            args=DeadReplyArgs(token, reply_id, dead_entry, dead_max, record.entry, record.max)))

    def inflight_outcome(self, *, keys: ConversationKeys, token: int, reply_id: str, part: int) -> InflightReply:
        code, status, provider_id, waited = self._inflight_outcome(keys=[keys.dfence, keys.outbox, keys.sent],
                                                                   args=[token, reply_id, part])
        return InflightReply(int(code), _text(status), _text(provider_id), int(waited or 0))

    def note_delivery_failure(self, *, keys: ConversationKeys, token: int, reply_id: str) -> int:
        """The failures counted for ``reply_id``, or -1 (fence moved) / -3 (no longer the head)."""
        return int(self._failure(keys=[keys.dfence, keys.outbox, keys.sent], args=[token, reply_id]))

    # --- pacing ------------------------------------------------------------------------------------

    def pace(self, *, keys: PaceKeys, recipient: str, rate_interval_us: int, rate_tolerance_us: int,
             recipient_interval_us: int, recipient_tolerance_us: int, max_wait_us: int) -> PaceReply:
        """An interval of 0 turns its limit off."""
        res = self._pace(keys=[keys.rate, keys.recipient(recipient)],
                         args=PaceArgs(rate_interval_us, rate_tolerance_us, recipient_interval_us,
                                       recipient_tolerance_us, max_wait_us))
        return PaceReply(int(res[0]) == 1, int(res[1]), int(res[2]))

    # --- timers (worker/store/timers.py) ----------------------------------------------------------

    def schedule(self, *, keys: ConversationKeys, index: str | None, input_id: str, held: bytes, due_ms: int,
                 max_timers: int) -> tuple[int, int]:
        """(an :class:`~worker.store.codes.Accepted` code, the timers held after it). ``index``: the due index when
        it may be touched in the same script (not on a Cluster)."""
        code, held_n = self._replication.call(
            self._client, self._schedule, what="accept",
            keys=[keys.timers, keys.timed, keys.seen, keys.tomb, *([index] if index else [])],
            args=[input_id, held, due_ms, max_timers, keys.cid if index else ""])
        return int(code), int(held_n)

    def cancel_timer(self, *, keys: ConversationKeys, input_id: str) -> bool:
        return int(self._cancel_timer(keys=[keys.timers, keys.timed], args=[input_id])) == 1

    def fire_timers(self, *, keys: ConversationKeys, globals_: tuple[str, str] | None, ttl_keys: list[str],
                    args: FireArgs) -> FireReply:
        """``globals_``: (the pending zset, the due index) when they may be touched in the same script."""
        res = self._replication.call(
            self._client, self._fire_timers, what="accept",
            keys=(*FireKeys(keys.timers, keys.timed, keys.inbox, keys.seen, keys.tomb, keys.inbound, keys.hold),
                  *(globals_ or ()), *ttl_keys),
            args=args)
        flat = [bytes(x) for x in res[5] or ()]
        fired = tuple((flat[i].decode("utf-8", "replace"), int(float(flat[i + 1]))) for i in range(0, len(flat), 2))
        return FireReply(int(res[0]), int(res[1]), int(res[2]), int(res[3]) == 1, int(res[4]), fired,
                         int(res[6]) == 1)

    def set_if_score(self, *, zset: str, member: str, score: float, new_score: int | None) -> bool:
        return int(self._set_if_score(keys=[zset], args=[member, repr(score),
                                                          "" if new_score is None else new_score])) == 1

    # --- admin -------------------------------------------------------------------------------------

    def record_status(self, *, keys: ConversationKeys, provider_id: str, status: str, detail: str, max_kept: int,
                      reply_id: str | None, part: int, record: RecordArgs) -> StatusReply:
        """``reply_id`` and ``part``: the reply part the status names (from the callback data), if any."""
        moved, latest, for_part = self._record_status(
            keys=RecordStatusKeys(keys.statuses, keys.statusorder, keys.sent, record.stream, record.dropped),
            args=RecordStatusArgs(provider_id, status, detail, max_kept, reply_id or "", part, record.entry,
                                  record.max))
        return StatusReply(int(moved) == 1, _text(latest) or "", int(for_part) == 1)

    def replay(self, *, dead: str, target: str, index: int, expected: bytes, entry: bytes) -> bool:
        return int(self._replay(keys=[dead, target], args=[index, expected, entry])) == 1

    def zrem_if_score(self, *, zset: str, member: bytes, score: float) -> bool:
        return int(self._zrem_if(keys=[zset], args=[member, repr(score)])) == 1

    def delete(self, *, keys: ConversationKeys, now_ms: int, tomb_ms: int, tomb_max: int,
               record: RecordArgs) -> tuple[int, bytes | None]:
        """Delete every key of the conversation but its tombstone; returns the ids the tombstone holds and the
        delete record's stream id (``None`` when the record is off)."""
        script_keys = [keys.tomb, record.stream, record.dropped, keys.seen,
                       *(key for key in keys.all() if key != keys.seen)]
        held, recorded = self._delete(keys=script_keys,
                                      args=DeleteArgs(now_ms, tomb_ms, tomb_max, f"d:{keys.cid}:{now_ms}",
                                                      record.entry, record.max))
        return int(held), bytes(recorded) if recorded else None
