"""The Redis store: mailbox, lease with fencing, atomic commit, outbox, trace, dead letters, sweeper support.

State and envelopes are opaque bytes here. Every multi-key change of one conversation is one Lua script
(see :mod:`worker.store.lua`), so it is atomic and runs unchanged on Redis Cluster; the only global keys
(the sweeper's ``pending`` set and the dead-letter index) are updated by separate commands, ordered so
that a crash between them strands nothing.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import redis
import redis.exceptions as rexc

from worker.errors import InboxFullError, StaleLeaseError, StoreError, StoreUnavailableError
from worker.store import lua
from worker.store.keys import ConversationKeys, GlobalKeys, validate_conversation_id

T = TypeVar("T")

# Keys that must keep their own expiry (leases, flags) rather than the idle TTL.
_OWN_TTL = ("lease", "dlease", "compacting", "hold")


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
    idle_ttl_ms: int = 0


@dataclass(frozen=True)
class AcceptResult:
    accepted: bool
    duplicate: bool
    depth: int


@dataclass(frozen=True)
class Lease:
    cid: str
    token: int


@dataclass(frozen=True)
class Snapshot:
    """The head of the mailbox and the state, read together under the lease."""

    input: bytes | None
    input_id: str | None
    state: bytes | None
    version: int


@dataclass(frozen=True)
class CommitResult:
    """``version`` and ``depth`` after the commit. With ``advance``: ``released`` when the mailbox was empty and
    the lease was given up, else the next input (``next``) with the attempts counted at it."""

    version: int
    depth: int
    released: bool = False
    next: Snapshot | None = None
    next_attempts: int = 0
    delivery: tuple[int, OutboxHead] | None = None  # with ``claim_delivery_ms``: the delivery token and claimed head

@dataclass(frozen=True)
class Begin:
    """The start of a drain: ``status`` is ``ok`` (the lease is ours: ``token``, the head input and the state in
    ``snapshot``, ``attempts`` at the head), ``empty``, ``busy`` (another worker holds the lease) or ``held``
    (a failing input waits for its scheduled retry)."""

    status: str
    token: int = 0
    snapshot: Snapshot | None = None
    attempts: int = 0


@dataclass(frozen=True)
class OutboxHead:
    """The outbox head claimed for a send: the reply and the part to send next (already marked in flight).
    ``crashed_in_window`` is true when that part was left in flight by an earlier deliverer that never marked it
    sent: a worker died between the send and the mark (or just before the send), so the part may already have
    reached the user."""

    record: bytes
    reply_id: str
    part: int
    crashed_in_window: bool


def split_entry(entry: bytes) -> tuple[str, bytes]:
    """``<id>\\n<payload>`` -> (id, payload)."""
    nl = entry.find(b"\n")
    if nl < 0:
        return entry.decode("utf-8", "replace"), b""
    return entry[:nl].decode("utf-8", "replace"), entry[nl + 1:]


def _claimed(entry: bytes, part: Any, crashed: Any) -> OutboxHead:
    rid, payload = split_entry(entry)
    return OutboxHead(payload, rid, int(part), int(crashed) == 1)


def join_entry(entry_id: str, payload: bytes) -> bytes:
    if "\n" in entry_id:
        raise StoreError("entry ids must not contain newlines")
    return entry_id.encode() + b"\n" + payload


def _wrap(fn: Callable[..., T]) -> Callable[..., T]:
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


class ConversationStore:
    """Conversation storage on Redis (standalone, Sentinel-managed or Cluster).

    ``client`` is a redis-py client (``redis.Redis``, ``redis.cluster.RedisCluster``, or fakeredis for tests)
    that returns bytes (no ``decode_responses``).
    """

    def __init__(self, client: Any, prefix: str = "parley", limits: StoreLimits | None = None) -> None:
        self.r = client
        self.prefix = prefix
        self.limits = limits or StoreLimits()
        self.g = GlobalKeys(prefix)
        self._cluster = hasattr(client, "get_nodes")  # a Cluster client sends a pipeline's commands per node
        s = client.register_script
        self._accept = s(lua.ACCEPT)
        self._acquire = s(lua.ACQUIRE)
        self._head = s(lua.HEAD)
        self._begin = s(lua.BEGIN)
        self._note_attempt = s(lua.NOTE_ATTEMPT)
        self._commit = s(lua.COMMIT)
        self._release = s(lua.RELEASE)
        self._quarantine = s(lua.QUARANTINE)
        self._put_state = s(lua.PUT_STATE)
        self._mark_inflight = s(lua.MARK_INFLIGHT)
        self._clear_inflight = s(lua.CLEAR_INFLIGHT)
        self._mark_sent = s(lua.MARK_SENT)
        self._dead_reply = s(lua.DEAD_REPLY)
        self._begin_delivery = s(lua.BEGIN_DELIVERY)
        self._claim_next = s(lua.CLAIM_NEXT)
        self._sent_last_claim_next = s(lua.SENT_LAST_CLAIM_NEXT)
        self._replay = s(lua.REPLAY)
        self._zrem_if = s(lua.ZREM_IF_SCORE)

    def keys(self, cid: str) -> ConversationKeys:
        return ConversationKeys(self.prefix, validate_conversation_id(cid))

    def _ttl_keys(self, k: ConversationKeys) -> list[str]:
        if self.limits.idle_ttl_ms <= 0:
            return []
        return [getattr(k, n) for n in ("state", "inbox", "seen", "fence", "attempts", "outbox", "sent", "dfence",
                                   "delivered", "trace", "quarantine", "dead", "statuses")]

    @staticmethod
    def _now_ms() -> int:
        return int(time.time() * 1000)

    # --- producers ---------------------------------------------------------------------------------

    @_wrap
    def accept(self, cid: str, envelope: bytes, input_id: str, *, max_inbox: int | None = None) -> AcceptResult:
        """Append an input to the mailbox unless its id was accepted before.

        Raises :class:`~worker.errors.InboxFullError` when the mailbox holds ``max_inbox`` inputs.
        """
        k = self.keys(cid)
        now = self._now_ms()
        # The sweeper must know of any conversation that might have work, so the pending mark comes first: in
        # the same script on a standalone Redis (one round trip), before it on a Cluster (another slot).
        args = [input_id, join_entry(input_id, envelope), now, max_inbox or self.limits.max_inbox,
                self.limits.dedupe_max_ids, self.limits.dedupe_ms, self.limits.idle_ttl_ms]
        if self._cluster:
            self.r.zadd(self.g.pending, {cid: now})
            code, depth = self._accept(keys=[k.inbox, k.seen, *self._ttl_keys(k)], args=[*args, ""])
        else:
            code, depth = self._accept(keys=[k.inbox, k.seen, self.g.pending, *self._ttl_keys(k)], args=[*args, cid])
        if int(code) < 0:
            raise InboxFullError(f"conversation {cid} has {depth} inputs waiting; the limit is "
                                 f"{max_inbox or self.limits.max_inbox}")
        return AcceptResult(accepted=int(code) == 1, duplicate=int(code) == 0, depth=int(depth))

    # --- applying inputs ---------------------------------------------------------------------------

    @_wrap
    def acquire(self, cid: str, lease_ms: int) -> Lease | None:
        """Take the conversation's lease, or ``None`` when another worker holds it."""
        k = self.keys(cid)
        token = int(self._acquire(keys=[k.lease, k.fence], args=[lease_ms]))
        return Lease(cid, token) if token > 0 else None

    @_wrap
    def begin(self, cid: str, lease_ms: int) -> Begin:
        """Start draining in one round trip: check the hold, the mailbox and the lease; take the lease; read
        the head input and the state; count an attempt at the head."""
        k = self.keys(cid)
        res = self._begin(keys=[k.hold, k.inbox, k.lease, k.fence, k.state, k.attempts], args=[lease_ms])
        code = int(res[0])
        if code <= 0:
            return Begin({0: "empty", -1: "busy", -2: "held"}[code])
        input_id, payload = split_entry(res[1])
        return Begin("ok", code, Snapshot(payload, input_id, res[2], int(res[3])), int(res[4]))

    @_wrap
    def head(self, cid: str) -> Snapshot:
        """The next input and the current state."""
        k = self.keys(cid)
        entry, blob, version = self._head(keys=[k.inbox, k.state])
        if entry is None:
            return Snapshot(None, None, blob, int(version))
        input_id, payload = split_entry(entry)
        return Snapshot(payload, input_id, blob, int(version))

    @_wrap
    def note_attempt(self, cid: str, token: int, input_id: str) -> int:
        """Count an attempt at ``input_id`` before applying it, so a worker that dies applying it still counts
        (poison-input detection); returns the attempts so far."""
        return self._count(cid, token, input_id, 1)

    @_wrap
    def note_retry(self, cid: str, token: int, input_id: str) -> int:
        """Record a clean, retryable failure of ``input_id`` (the model was unavailable): the attempt is given
        back (it did not crash the worker) and counted as a retry instead; returns the retries so far."""
        self._count(cid, token, input_id, -1)
        return self._count(cid, token, f"{input_id}:retries", 1)

    def _count(self, cid: str, token: int, field: str, delta: int) -> int:
        k = self.keys(cid)
        n = int(self._note_attempt(keys=[k.fence, k.attempts], args=[token, field, delta]))
        if n < 0 and delta > 0:
            raise StaleLeaseError(f"lease on {cid} was taken over")
        return n

    @_wrap
    def commit(self, cid: str, token: int, *, expected_version: int, input_id: str, new_state: bytes | None,
               reply: bytes | None = None, reply_id: str | None = None, trace: bytes | None = None,
               dead: bytes | None = None, lease_ms: int = 180_000, advance: bool = False,
               claim_delivery_ms: int = 0) -> CommitResult:
        """Apply one input atomically: write the state (``None`` keeps it, ``b""`` clears it), remove the input
        from the mailbox, queue the reply, append the trace entry or the dead letter, renew the lease.

        With ``advance`` the result carries the next input (attempt counted), or ``released`` when the mailbox is
        empty and the lease was given up in the same step (so no producer's wake-up can be lost). With
        ``claim_delivery_ms`` as well, a released commit also takes the delivery lease and claims the outbox
        head when nobody delivers (``delivery``: what :meth:`begin_delivery` would return, one round trip fewer).

        Raises :class:`~worker.errors.StaleLeaseError` and changes nothing when another worker took the
        conversation over, the state version moved, or the input is no longer at the head of the mailbox.
        """
        k = self.keys(cid)
        mode = "keep" if new_state is None else ("clear" if new_state == b"" else "set")
        reply_entry = join_entry(reply_id or input_id, reply) if reply is not None else b""
        if dead:
            # Index first: a crash after the commit must not leave a dead letter ops cannot find. A refused
            # commit leaves an index entry with nothing behind it, which `parley dead` shows as empty.
            self.r.zadd(self.g.dead_index, {cid: self._now_ms()})
        res = self._commit(
            keys=[k.fence, k.state, k.inbox, k.attempts, k.outbox, k.trace, k.dead, k.lease, k.dlease, k.dfence,
                  k.sent, *self._ttl_keys(k)],
            args=[token, expected_version, input_id, mode, new_state or b"", reply_entry, trace or b"",
                  dead or b"", lease_ms, self.limits.trace_max, self.limits.dead_max, self.limits.idle_ttl_ms,
                  "1" if advance else "0", str(claim_delivery_ms) if claim_delivery_ms > 0 else ""],
        )
        code, extra = int(res[0]), res[1]
        if code == -1:
            raise StaleLeaseError(f"lease on {cid} was taken over; commit refused")
        if code == -2:
            raise StaleLeaseError(f"state of {cid} moved to version {int(extra)}; commit refused")
        if code == -3:
            raise StaleLeaseError(f"input {input_id} of {cid} is no longer at the head of the mailbox")
        if advance and len(res) >= 3 and int(res[2]) == 1:
            delivery = (int(res[3]), _claimed(res[4], res[5], res[6])) if len(res) >= 7 else None
            return CommitResult(version=code, depth=0, released=True, delivery=delivery)
        if advance and len(res) >= 5:
            next_id, payload = split_entry(res[3])
            after = {"set": new_state, "clear": None}.get(mode, res[5] if len(res) >= 6 else None)
            return CommitResult(version=code, depth=int(extra), next=Snapshot(payload, next_id, after, code),
                                next_attempts=int(res[4]))
        return CommitResult(version=code, depth=int(extra))

    @_wrap
    def release(self, cid: str, token: int, *, force: bool = False) -> bool:
        """Give the lease up. Returns ``True`` (and keeps the lease) when inputs arrived meanwhile: the caller
        must keep draining. ``force`` gives it up regardless (after an error; the caller re-wakes)."""
        k = self.keys(cid)
        return int(self._release(keys=[k.fence, k.lease, k.inbox], args=[token, "1" if force else "0"])) == 1

    @_wrap
    def quarantine(self, cid: str, token: int, blob: bytes, reason: str, *, expected_version: int) -> int:
        """Set an unusable state blob aside (capped list) and clear the state; returns the new version."""
        import msgpack

        k = self.keys(cid)
        record = msgpack.packb({"at": time.time(), "reason": reason, "blob": blob}, use_bin_type=True)
        code, _ = self._quarantine(keys=[k.fence, k.state, k.quarantine],
                                   args=[token, expected_version, record, self.limits.quarantine_max])
        if int(code) < 0:
            raise StaleLeaseError(f"lease or state of {cid} moved; quarantine refused")
        return int(code)

    @_wrap
    def put_state(self, cid: str, *, expected_version: int, new_state: bytes | None) -> int:
        """Compare-and-set the state (ops and tests). Raises :class:`StaleLeaseError` on a version mismatch."""
        k = self.keys(cid)
        code, extra = self._put_state(keys=[k.state], args=[expected_version, "set" if new_state else "clear",
                                                            new_state or b""])
        if int(code) < 0:
            raise StaleLeaseError(f"state of {cid} is at version {int(extra)}, not {expected_version}")
        return int(code)

    @_wrap
    def hold(self, cid: str, ms: int) -> None:
        """Hold the conversation: drains before ``ms`` from now return at once (the retry that set it is
        already scheduled), so wake-ups from new inputs do not start extra retries of a failing input."""
        self.r.set(self.keys(cid).hold, b"1", px=max(1, int(ms)))

    @_wrap
    def held(self, cid: str) -> bool:
        return bool(self.r.exists(self.keys(cid).hold))

    @_wrap
    def try_mark_compacting(self, cid: str, ttl_ms: int) -> bool:
        return bool(self.r.set(self.keys(cid).compacting, b"1", nx=True, px=ttl_ms))

    @_wrap
    def clear_compacting(self, cid: str) -> None:
        self.r.delete(self.keys(cid).compacting)

    # --- delivery ----------------------------------------------------------------------------------

    @_wrap
    def begin_delivery(self, cid: str, lease_ms: int) -> tuple[int | None, OutboxHead | None]:
        """Take the delivery lease and claim the outbox head in one round trip.

        Returns ``(None, None)`` when another worker delivers or nothing waits; else the token and the claimed
        head: its next part is marked in flight, so call the channel next (see :meth:`claim_next`)."""
        k = self.keys(cid)
        res = self._begin_delivery(keys=[k.dlease, k.dfence, k.outbox, k.sent], args=[lease_ms])
        if int(res[0]) <= 0:
            return None, None
        return int(res[0]), _claimed(res[1], res[2], res[3])

    @_wrap
    def claim_next(self, cid: str, token: int, lease_ms: int) -> OutboxHead | None:
        """Claim the outbox head (marking its next part in flight), or give the delivery lease up, atomically,
        when the outbox is empty (then returns None)."""
        k = self.keys(cid)
        res = self._claim_next(keys=[k.dfence, k.outbox, k.sent, k.dlease], args=[token, lease_ms])
        return self._claim_result(cid, res)

    @_wrap
    def sent_last_claim_next(self, cid: str, token: int, reply_id: str, provider_id: str,
                             lease_ms: int) -> OutboxHead | None:
        """Record the last part of the head reply as sent, drop the reply from the outbox, and claim the next one
        (or give the lease up when none is left), in one round trip."""
        k = self.keys(cid)
        res = self._sent_last_claim_next(keys=[k.dfence, k.outbox, k.sent, k.delivered, k.dlease],
                                         args=[token, reply_id, provider_id, self.limits.delivered_max, lease_ms])
        return self._claim_result(cid, res)

    @staticmethod
    def _claim_result(cid: str, res: list[Any]) -> OutboxHead | None:
        code = int(res[0])
        if code < 0:
            raise StaleLeaseError(f"delivery lease on {cid} was taken over")
        return _claimed(res[1], res[2], res[3]) if code == 1 else None

    @_wrap
    def mark_inflight(self, cid: str, token: int, reply_id: str, part: int) -> None:
        k = self.keys(cid)
        if int(self._mark_inflight(keys=[k.dfence, k.sent], args=[token, reply_id, part])) < 0:
            raise StaleLeaseError(f"delivery lease on {cid} was taken over")

    @_wrap
    def clear_inflight(self, cid: str, token: int) -> None:
        k = self.keys(cid)
        self._clear_inflight(keys=[k.dfence, k.sent], args=[token])

    @_wrap
    def mark_sent(self, cid: str, token: int, reply_id: str, part: int, provider_id: str,
                  lease_ms: int = 180_000) -> None:
        """Record a sent part that is not the reply's last (and its provider message id); the last one goes
        through :meth:`sent_last_claim_next`, which also takes the reply out of the outbox."""
        k = self.keys(cid)
        code = int(self._mark_sent(keys=[k.dfence, k.outbox, k.sent, k.dlease],
                                   args=[token, reply_id, part, provider_id, lease_ms]))
        if code < 0:
            raise StaleLeaseError(f"delivery of {reply_id} on {cid} was taken over")

    @_wrap
    def dead_letter_reply(self, cid: str, token: int, reply_id: str, dead: bytes) -> None:
        """Move the outbox head to the dead letters (``dead`` is the record to keep)."""
        k = self.keys(cid)
        self.r.zadd(self.g.dead_index, {cid: self._now_ms()})  # index first, as in commit
        code = int(self._dead_reply(keys=[k.dfence, k.outbox, k.sent, k.dead],
                                    args=[token, reply_id, dead, self.limits.dead_max]))
        if code < 0:
            raise StaleLeaseError(f"delivery of {reply_id} on {cid} was taken over")

    @_wrap
    def release_delivery(self, cid: str, token: int, *, force: bool = False) -> bool:
        k = self.keys(cid)
        return int(self._release(keys=[k.dfence, k.dlease, k.outbox], args=[token, "1" if force else "0"])) == 1

    @_wrap
    def delivered(self, cid: str) -> list[tuple[str, list[str]]]:
        """Delivered replies (oldest first) with the provider's message ids of their parts."""
        out = []
        for e in self.r.lrange(self.keys(cid).delivered, 0, -1):
            rid, _, ids = e.decode().partition("\t")
            out.append((rid, ids.split(",") if ids else []))
        return out

    # --- sweeper -----------------------------------------------------------------------------------

    @_wrap
    def stranded(self, limit: int = 1000, older_than_ms: int = 5000) -> list[str]:
        """Conversations with waiting inputs or replies and nobody working on them. Conversations with nothing
        left are dropped from the ``pending`` set (unless a producer touched them since we looked)."""
        cutoff = self._now_ms() - older_than_ms
        rows = self.r.zrangebyscore(self.g.pending, "-inf", cutoff, start=0, num=limit, withscores=True)
        out: list[str] = []
        for member, score in rows:
            cid = member.decode()
            try:
                k = self.keys(cid)
            except Exception:
                self.r.zrem(self.g.pending, member)
                continue
            pipe = self.r.pipeline(transaction=False)
            pipe.llen(k.inbox)
            pipe.llen(k.outbox)
            pipe.exists(k.lease)
            pipe.exists(k.dlease)
            pipe.exists(k.hold)
            inbox, outbox, lease, dlease, hold = pipe.execute()
            if (inbox and not lease and not hold) or (outbox and not dlease):
                out.append(cid)
            elif not inbox and not outbox:
                self._zrem_if(keys=[self.g.pending], args=[member, repr(score)])
        return out

    @_wrap
    def try_lock(self, name: str, ttl_ms: int) -> bool:
        return bool(self.r.set(self.g.lock(name), b"1", nx=True, px=ttl_ms))

    # --- operations --------------------------------------------------------------------------------

    @_wrap
    def ping(self) -> bool:
        return bool(self.r.ping())

    @_wrap
    def inbox_depth(self, cid: str) -> int:
        return int(self.r.llen(self.keys(cid).inbox))

    @_wrap
    def outbox_depth(self, cid: str) -> int:
        return int(self.r.llen(self.keys(cid).outbox))

    @_wrap
    def inbox(self, cid: str) -> list[tuple[str, bytes]]:
        return [split_entry(e) for e in self.r.lrange(self.keys(cid).inbox, 0, -1)]

    @_wrap
    def outbox(self, cid: str) -> list[tuple[str, bytes]]:
        return [split_entry(e) for e in self.r.lrange(self.keys(cid).outbox, 0, -1)]

    @_wrap
    def trace(self, cid: str, limit: int = 100) -> list[bytes]:
        return list(self.r.lrange(self.keys(cid).trace, -limit, -1))

    @_wrap
    def quarantined(self, cid: str) -> list[bytes]:
        return list(self.r.lrange(self.keys(cid).quarantine, 0, -1))

    @_wrap
    def dead_letters(self, cid: str) -> list[bytes]:
        return list(self.r.lrange(self.keys(cid).dead, 0, -1))

    @_wrap
    def dead_index(self) -> list[str]:
        return [m.decode() for m in self.r.zrange(self.g.dead_index, 0, -1)]

    @_wrap
    def replay_dead(self, cid: str, index: int, *, target: str, entry_id: str, payload: bytes) -> bool:
        """Move dead letter ``index`` back to the end of the mailbox (``target="inbox"``) or the outbox.
        ``entry_id``/``payload`` are what to queue (decoded from the dead letter by the caller)."""
        k = self.keys(cid)
        current = self.r.lindex(k.dead, index)
        if current is None:
            return False
        key = k.inbox if target == "inbox" else k.outbox
        ok = int(self._replay(keys=[k.dead, key], args=[index, current, join_entry(entry_id, payload)])) == 1
        if ok:
            self.r.zadd(self.g.pending, {cid: self._now_ms()})
            if not self.r.llen(k.dead):
                self.r.zrem(self.g.dead_index, cid)
        return ok

    @_wrap
    def record_status(self, cid: str, provider_id: str, status: str, detail: str = "") -> None:
        """Record a delivery status webhook (sent, delivered, read, failed) for the conversation."""
        k = self.keys(cid)
        pipe = self.r.pipeline(transaction=False)
        pipe.rpush(k.statuses, f"{provider_id}\t{status}\t{int(time.time())}\t{detail}".encode())
        pipe.ltrim(k.statuses, -self.limits.statuses_max, -1)
        pipe.execute()

    @_wrap
    def statuses(self, cid: str) -> list[str]:
        return [e.decode() for e in self.r.lrange(self.keys(cid).statuses, 0, -1)]

    @_wrap
    def delete(self, cid: str) -> None:
        """Delete every key of the conversation and forget it in the global indexes."""
        k = self.keys(cid)
        self.r.delete(*k.all())
        self.r.zrem(self.g.pending, cid)
        self.r.zrem(self.g.dead_index, cid)

    @contextmanager
    def pipeline(self) -> Iterator[Any]:
        pipe = self.r.pipeline(transaction=False)
        yield pipe
        pipe.execute()

    # ----- BEGIN service-helper block (issue 12); the store helper's version of the same spec replaces it. --------

    @functools.cached_property
    def _renew_lease_script(self) -> Any:
        return self.r.register_script(lua.RENEW_LEASE)

    @functools.cached_property
    def _note_delivery_failure_script(self) -> Any:
        return self.r.register_script(lua.NOTE_DELIVERY_FAILURE)

    @_wrap
    def renew_lease(self, cid: str, token: int, lease_ms: int) -> bool:
        """The heartbeat of a running turn: ``True`` and the lease (re)set to ``token`` for ``lease_ms`` while the
        fence still holds ``token``; ``False``, changing nothing, when another worker took a newer token."""
        k = self.keys(cid)
        return int(self._renew_lease_script(keys=[k.fence, k.lease], args=[token, lease_ms])) == 1

    @_wrap
    def renew_delivery_lease(self, cid: str, token: int, lease_ms: int) -> bool:
        """:meth:`renew_lease` for the delivery lease (the same script over ``dfence`` and ``dlease``)."""
        k = self.keys(cid)
        return int(self._renew_lease_script(keys=[k.dfence, k.dlease], args=[token, lease_ms])) == 1

    @_wrap
    def note_delivery_failure(self, cid: str, token: int, reply_id: str) -> int:
        """Count one failed (retryable) send of the outbox head reply ``reply_id``; returns the failures counted
        for that reply so far. Raises :class:`~worker.errors.StaleLeaseError` when the delivery fence moved."""
        k = self.keys(cid)
        n = int(self._note_delivery_failure_script(keys=[k.dfence, k.sent], args=[token, reply_id]))
        if n < 0:
            raise StaleLeaseError(f"delivery lease on {cid} was taken over")
        return n

    @_wrap
    def read_state(self, cid: str) -> StateRead:
        """The current state, read without a lease."""
        blob, version = self.r.hmget(self.keys(cid).state, "blob", "version")
        return StateRead(blob, int(version or 0))

    @_wrap
    def record_ping(self, key: str, value: str) -> None:
        """Append ``value`` to the list ``key`` (benchmark round trips and health probes)."""
        self.r.rpush(key, value)

    # ----- END service-helper block --------------------------------------------------------------------------------


def from_url(url: str, **kwargs: Any) -> redis.Redis:
    return redis.Redis.from_url(url, **kwargs)


# ----- BEGIN service-helper block (issue 12) ------------------------------------------------------------------------
@dataclass(frozen=True)
class StateRead:
    """A conversation's state read without a lease: the blob (``None`` when there is none) and its version."""

    blob: bytes | None
    version: int
# ----- END service-helper block ---------------------------------------------------------------------------------------
