"""What every part of the store shares: the limits, the public result types, the entry codec, the error mapping
and :class:`StoreBase` (the client, key builders and the one :class:`~worker.store.scripts.Scripts` object)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import redis.exceptions as rexc

from worker.errors import StoreError, StoreUnavailableError
from worker.store.keys import ConversationKeys, GlobalKeys, RecordKeys, validate_conversation_id
from worker.store.replication import Replication
from worker.store.scripts import ClaimReply, RecordArgs, Scripts

T = TypeVar("T")

#: How long an ingress's word that it records status webhooks holds, and how often one says it again at most.
STATUS_INGRESS_TTL_MS = 86_400_000
STATUS_INGRESS_REFRESH_S = 60.0


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


def utc_day(at: float | None = None) -> str:
    """The UTC day of ``at`` (default now), as the usage counters name it: ``YYYY-MM-DD``."""
    return time.strftime("%Y-%m-%d", time.gmtime(at))


@dataclass(frozen=True)
class StoreLimits:
    """Bounds on everything that could grow."""

    max_inbox: int = 1000
    dedupe_max_ids: int = 10_000
    dedupe_ms: int = 4 * 86_400_000
    trace_max: int = 2000
    dead_max: int = 1000
    quarantine_max: int = 20
    delivered_max: int = 200
    statuses_max: int = 200
    journal_max: int = 512  # entries of one input's turn journal (model rounds + tool results)
    tombstone_ms: int = 2 * 86_400_000  # how long a delete keeps the input ids it saw (0: not at all)
    idle_ttl_ms: int = 0
    wait_replicas: int = 0  # replicas that must acknowledge an accept or a commit (WAIT); 0: do not wait
    wait_timeout_ms: int = 1000
    record_max: int = 0  # entries kept in a durable-record stream before the oldest are dropped; 0: no record


@dataclass(frozen=True)
class AcceptResult:
    accepted: bool
    duplicate: bool
    depth: int


@dataclass(frozen=True)
class Snapshot:
    """The head of the mailbox and the state, read together under the lease."""

    input: bytes | None
    input_id: str | None
    state: bytes | None
    version: int
    after: tuple[tuple[str, bytes], ...] = ()  # (id, envelope) of inputs after the head, when asked for (a burst)
    # The stored state's tag ('' when none): it changes with every write of the blob. ``state`` is None while the
    # tag is set when the caller said it holds that state already (``begin(have=tag)``): the blob was not sent.
    tag: str = ""
    journal: bool = True  # whether the head's turn journal may hold entries (False: known empty, nothing to read)


@dataclass(frozen=True)
class StateRead:
    """The state read without a lease (compaction, inspection): it may be outdated as soon as it is read."""

    blob: bytes | None
    version: int


@dataclass(frozen=True)
class OutboxHead:
    """The outbox head claimed for a send: the reply and the part to send next (already marked in flight).
    ``crashed_in_window`` is true when that part was left in flight by an earlier deliverer that never marked it
    sent: a worker died between the send and the mark (or just before the send), so the part may already have
    reached the user. ``last_inbound`` is when the player last wrote (seconds since the epoch; None when no
    message is known), read with the claim: the customer-service window the send must respect. It can only be
    older than the truth by the time the send takes (the time only moves forward), so it errs on the strict side."""

    record: bytes
    reply_id: str
    part: int
    crashed_in_window: bool
    last_inbound: float | None


@dataclass(frozen=True)
class InflightOutcome:
    """What is known of a part left in flight by a crash (see
    :meth:`~worker.store.outbox.OutboxStore.inflight_outcome`): the best status webhook recorded for it and the
    provider message id it named (``None`` when none came), and how long ago (ms) a deliverer first found the part
    left in flight."""

    status: str | None
    provider_id: str | None
    waited_ms: int


@dataclass(frozen=True)
class CommitResult:
    """``version`` and ``depth`` after the commit: ``released`` when the mailbox was empty and the lease was given
    up, else the next input (``next``) with the attempts counted at it."""

    version: int
    depth: int
    released: bool = False
    next: Snapshot | None = None
    next_attempts: int = 0
    delivery: tuple[int, OutboxHead] | None = None  # with ``claim_delivery_ms``: the delivery token and claimed head
    tag: str = ""  # the stored state's tag after the commit ('' when there is no state)


@dataclass(frozen=True)
class MessageStatus:
    """The latest delivery status of one message we sent (by the provider's message id): ``status`` as WhatsApp
    names it (sent, delivered, read, failed, ...), ``at_ms`` when it was recorded, ``detail`` the errors of a
    failed one."""

    provider_id: str
    status: str
    at_ms: int
    detail: str = ""


@dataclass(frozen=True)
class StatusRecorded:
    """What recording one status webhook did: ``moved`` when it moved the message's status forward (a late or
    repeated one does not), ``latest`` the status the message has now, ``for_part`` when it was also kept as
    proof that the reply part it names (still in flight) reached the provider."""

    moved: bool
    latest: str
    for_part: bool = False


@dataclass(frozen=True)
class JournalRead:
    """One input's turn journal as stored: model rounds by step, tool results by (step, call id); encoded
    entries (the core's :mod:`worker.conversation.turn_journal` codecs read them)."""

    rounds: dict[int, bytes]
    results: dict[tuple[int, str], bytes]
    burst: tuple[str, ...] | None = None  # the ids of the inputs the turn takes in, when it recorded them


@dataclass(frozen=True)
class Begin:
    """The start of a drain: ``status`` is ``ok`` (the lease is ours: ``token``, the head input and the state in
    ``snapshot``, ``attempts`` at the head), ``empty``, ``busy`` (another worker holds the lease) or ``held``
    (a failing input waits for its scheduled retry)."""

    status: str
    token: int = 0
    snapshot: Snapshot | None = None
    attempts: int = 0


def split_entry(entry: bytes) -> tuple[str, bytes]:
    """``<id>\\n<payload>`` -> (id, payload)."""
    nl = entry.find(b"\n")
    if nl < 0:
        return entry.decode("utf-8", "replace"), b""
    return entry[:nl].decode("utf-8", "replace"), entry[nl + 1:]


def join_entry(entry_id: str, payload: bytes) -> bytes:
    if "\n" in entry_id:
        raise StoreError("entry ids must not contain newlines")
    return entry_id.encode() + b"\n" + payload


def claimed(reply: ClaimReply) -> OutboxHead:
    rid, payload = split_entry(reply.entry or b"")
    inbound = None if reply.inbound_ms is None else reply.inbound_ms / 1000
    return OutboxHead(payload, rid, reply.part, reply.crashed, inbound)


def store_errors(fn: Callable[..., T]) -> Callable[..., T]:
    """Map redis-py's errors to the project's: an outage is retryable, a refused command is not."""

    @functools.wraps(fn)
    def inner(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except (rexc.ConnectionError, rexc.TimeoutError, rexc.BusyLoadingError, rexc.TryAgainError,
                rexc.ClusterDownError) as exc:
            raise StoreUnavailableError(f"Redis unavailable: {type(exc).__name__}: {exc}") from exc
        except rexc.ResponseError as exc:
            if "LOADING" in str(exc) or "MASTERDOWN" in str(exc) or "READONLY" in str(exc):
                raise StoreUnavailableError(f"Redis unavailable: {exc}") from exc
            raise StoreError(f"Redis refused a command: {exc}") from exc
    return inner


_KEYS_CACHED = 4096
_TTL_KEYS = ("state", "inbox", "seen", "fence", "attempts", "outbox", "sent", "dfence", "delivered", "trace",
             "quarantine", "dead", "statuses", "statusorder", "journal", "inbound")


class StoreBase:
    """The client, prefix, limits, key builders and scripts that the mailbox, outbox and admin parts share.

    ``client`` is a redis-py client (``redis.Redis``, ``redis.cluster.RedisCluster``, or fakeredis for tests)
    that returns bytes (no ``decode_responses``).
    """

    def __init__(self, client: Any, prefix: str = "parley", limits: StoreLimits | None = None) -> None:
        self._r = client
        self.prefix = prefix
        self._keys_cache: dict[str, ConversationKeys] = {}
        self.limits = limits or StoreLimits()
        self.g = GlobalKeys(prefix)
        self._cluster = hasattr(client, "get_nodes")  # a Cluster client sends a pipeline's commands per node
        replication = Replication(0 if self._cluster else self.limits.wait_replicas, self.limits.wait_timeout_ms)
        self._scripts = Scripts(client, replication)
        self.records = RecordKeys(prefix, clustered=self._cluster)
        self._status_announced: float | None = None  # when this process (an ingress) last said it records statuses

    def _entry(self, build: Callable[..., bytes], *args: Any, **kwargs: Any) -> bytes | None:
        """``build(*args, **kwargs)``, a durable-record entry, only while the record is on (not built for nothing)."""
        return build(*args, **kwargs) if self.limits.record_max > 0 else None

    def _record_args(self, cid: str, entry: bytes | None, cap: int | None = None) -> RecordArgs:
        """Where ``cid``'s scripts append the durable record, with ``entry``; the keys are named even when the
        record is off (a Cluster routes a script by all its keys, which must share the conversation's slot).
        ``cap``: the stream's cap when it is not this process's own (``limits.record_max``)."""
        stream = self.records.stream(cid)
        cap = self.limits.record_max if cap is None else cap
        on = cap > 0 and bool(entry)
        return RecordArgs(stream, self.records.dropped_of(stream), cap if on else 0, (entry or b"") if on else b"")

    @store_errors
    def deployment_record_cap(self) -> int:
        """The record stream's cap when the deployment keeps a durable record, else 0: this process's own setting,
        or what ``parley db upgrade`` and the exporter announced in Redis (read now, never cached: a delete must
        reach the database whichever process issues it)."""
        if self.limits.record_max > 0:
            return self.limits.record_max
        raw = self._r.get(self.g.record_on)
        try:
            return max(0, int(raw or 0))
        except ValueError:
            return 0

    @store_errors
    def announce_status_ingress(self) -> None:
        """Say in Redis that a webhook ingress records status webhooks (for a day; once it has, this store says it
        again as it records statuses, at most once a minute): workers left with ``PARLEY_STATUS_WEBHOOKS=auto``
        then wait for a status before resending a part a crash left in flight."""
        now = time.monotonic()
        if self._status_announced is None or now - self._status_announced >= STATUS_INGRESS_REFRESH_S:
            self._r.set(self.g.status_ingress, 1, px=STATUS_INGRESS_TTL_MS)
            self._status_announced = now

    @store_errors
    def status_ingress_announced(self) -> bool:
        """Whether an ingress said within the last day that it records status webhooks."""
        return bool(self._r.exists(self.g.status_ingress))

    @store_errors
    def announce_record(self) -> None:
        """Say in Redis that this deployment keeps a durable record (with this process's stream cap)."""
        if self.limits.record_max > 0:
            self._r.set(self.g.record_on, self.limits.record_max)

    def keys(self, cid: str) -> ConversationKeys:
        # Built (and the id validated) once per conversation while it is among the recently used: a turn asks
        # for them several times. Immutable, so sharing them between threads is safe.
        k = self._keys_cache.get(cid)
        if k is None:
            k = ConversationKeys(self.prefix, validate_conversation_id(cid))
            if len(self._keys_cache) >= _KEYS_CACHED:
                self._keys_cache.clear()  # cheaper than an LRU, and a refill is one build per conversation
            self._keys_cache[cid] = k
        return k

    def _ttl_keys(self, k: ConversationKeys) -> list[str]:
        if self.limits.idle_ttl_ms <= 0:
            return []
        return [getattr(k, n) for n in _TTL_KEYS]

    @staticmethod
    def _now_ms() -> int:
        return int(time.time() * 1000)
