"""The drain's side of the mailbox: begin, commit, release, retries, holds, quarantine, the compaction flag and the
lease-free state read (producers accept inputs through :mod:`worker.store.accepts`)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import msgpack

from worker.store.answers import Begin, CommitResult, Pause, Snapshot, StateRead
from worker.store.codes import Idle, Refusal, refused
from worker.store.core import StoreCore
from worker.store.entry_codec import claimed_head, join_entry, split_all, split_entry
from worker.store.redis_errors import store_errors
from worker.store.script_args import NO_ARCHIVE, ArchiveWrite
from worker.store.script_replies import CommitReply


def utc_day(at: float | None = None) -> str:
    """The UTC day of ``at`` (default now), as the usage counters name it: ``YYYY-MM-DD``."""
    return time.strftime("%Y-%m-%d", time.gmtime(at))


class MailboxStore(StoreCore):
    """Inputs taken from the head, state and replies out, one fenced lease holder at a time; inputs come in through
    :class:`~worker.store.accepts.AcceptStore`."""

    @store_errors
    def begin(self, cid: str, lease_ms: int, *, peek: int = 0, have: str = "") -> Begin:
        """Start draining in one round trip: check the hold, the mailbox and the lease; take the lease; read
        the head input and the state; count an attempt at the head. With ``peek``, the snapshot also carries up
        to that many inputs after the head (what a burst may take in). ``have`` is the tag of the state the
        caller kept decoded from an earlier turn: when it is still the stored one, the blob is not sent
        (``snapshot.state`` is None and ``snapshot.tag`` equals ``have``)."""
        res = self._scripts.begin(keys=self.keys(cid), lease_ms=lease_ms, peek=peek, held_tag=have)
        if res.code <= 0:
            return Begin(_IDLE[Idle(res.code)])
        input_id, payload = split_entry(res.entry or b"")
        return Begin("ok", res.code, Snapshot(payload, input_id, res.blob, res.version, split_all(res.after),
                                             res.tag, res.journal, pause_read=True,
                                             pause=Pause.stored(res.paused, self._now_ms()),
                                             opted_out=res.opted_out), res.attempts)

    @store_errors
    def peek(self, cid: str, start: int, count: int) -> tuple[tuple[str, bytes], ...]:
        """Up to ``count`` queued inputs from position ``start`` of the mailbox (0 is the head), as (id, envelope),
        read without the lease: what arrived behind a turn while its model answered (a double text)."""
        if count <= 0:
            return ()
        return split_all(self._client.lrange(self.keys(cid).inbox, start, start + count - 1))

    @store_errors
    def defer(self, cid: str, token: int, input_id: str, hold_ms: int) -> None:
        """Put the head input (a burst still being typed) off for ``hold_ms``: the lease is given up, the attempt
        counted at the head is given back and the conversation is held, so drains return at once until then; the
        caller schedules the wake-up that ends the hold. ``hold_ms`` 0 holds nothing: the drain hands the
        conversation back to the queue with inputs waiting (fair scheduling), and the caller's wake-up resumes it.

        Raises :class:`~worker.errors.StaleLeaseError`, changing nothing, when the lease is no longer ours.
        """
        if not self._scripts.defer(keys=self.keys(cid), token=token, input_id=input_id, hold_ms=hold_ms):
            raise refused(Refusal.FENCE_MOVED, cid=cid, step="defer")

    @store_errors
    def note_retry(self, cid: str, token: int, input_id: str, *, bad_response: bool = False) -> int:
        """Record a clean, retryable failure of ``input_id`` (the model was unavailable, or ``bad_response``: its
        answer could not be read): the attempt is given back (it did not crash the worker) and counted as a retry
        instead; returns the retries of that kind so far (the two kinds are counted apart)."""
        n = self._scripts.note_retry(keys=self.keys(cid), token=token, input_id=input_id,
                                     counter="bad" if bad_response else "retries")
        if n < 0:
            raise refused(n, cid=cid)
        return n

    @store_errors
    def commit(self, cid: str, token: int, *, expected_version: int, input_id: str, new_state: bytes | None,
               reply: bytes | None = None, trace: bytes | None = None, dead: bytes | None = None,
               lease_ms: int = 180_000, claim_delivery_ms: int = 0, also: Sequence[str] = (),
               peek: int = 0, record: bytes | None = None, tokens: int = 0,
               appended_to: int | None = None, folded_from: int | None = None,
               archive: ArchiveWrite = NO_ARCHIVE) -> CommitResult:
        """Apply one input (or a burst: ``input_id`` and the ids in ``also`` after it, in mailbox order) atomically:
        write the state (``None`` keeps it, ``b""`` clears it), remove the inputs from the mailbox, queue the reply
        (under the input's id), append the trace entry or the dead letter.

        The result carries the next input (attempt counted, lease renewed), or ``released`` when the mailbox is
        empty and the lease was given up in the same step (so no producer's wake-up can be lost). With
        ``claim_delivery_ms``, a released commit also takes the delivery lease and claims the outbox head when
        nobody delivers (``delivery``: what :meth:`begin_delivery` would return, one round trip fewer). ``peek``
        is as for :meth:`begin`, for the next input. ``record``: the durable-record entry of what the commit
        did, appended to the record stream in the same step (ignored while the record is off); ``tokens``: what
        the turn used, added to the conversation's count for today (see :meth:`tokens_today`). ``appended_to``: the
        new state is the stored blob, ``appended_to`` bytes long, with bytes appended (see
        :meth:`~worker.conversation.resident.Resident.append_of`): only those are sent and appended. With
        ``folded_from`` (less than ``appended_to``), the stored bytes from there on are replaced by the new state's
        (a fold of its loose frames into a compressed run): only the new state's bytes from there are sent.
        ``archive``: the batch of what this commit takes out of the history (and its index segment), appended to
        the conversation's archive in the same step, bounded by ``limits.recall_max_bytes``; or the archive erased.

        Raises :class:`~worker.errors.StaleLeaseError` and changes nothing when another worker took the
        conversation over, the state version moved, or the inputs are no longer at the head of the mailbox.
        """
        keys = self.keys(cid)
        mode = "keep" if new_state is None else ("clear" if new_state == b"" else "set")
        blob = new_state or b""
        cut = appended_to if folded_from is None else folded_from
        if appended_to and cut and new_state:
            mode, blob = "append", new_state[cut:]
        if dead:
            # Index first: a crash after the commit must not leave a dead letter ops cannot find. A refused
            # commit leaves an index entry with nothing behind it, which `parley dead` shows as empty.
            self._client.zadd(self.global_keys.dead_index, {cid: self._now_ms()})
        res = self._scripts.commit(
            keys=keys, token=token, expected_version=expected_version, input_id=input_id,
            mode=mode, blob=blob, reply_entry=join_entry(input_id, reply) if reply is not None else b"",
            trace_entry=trace or b"", dead_entry=dead or b"", lease_ms=lease_ms, trace_max=self.limits.trace_max,
            dead_max=self.limits.dead_max, ttl_ms=self.limits.idle_ttl_ms, claim_ms=claim_delivery_ms,
            record=self._record_args(cid, record), peek=peek, burst_ids=also, usage_day=utc_day(), tokens=tokens,
            append_at=appended_to or 0, cut_at=cut or 0, archive=archive,
            archive_max_bytes=self.limits.recall_max_bytes)
        return self._commit_result(cid, input_id, new_state, res)

    @store_errors
    def tokens_today(self, cid: str) -> int:
        """Tokens the conversation's turns used today (UTC), as its commits counted them."""
        return int(self._client.hget(self.keys(cid).usage, utc_day()) or 0)

    @staticmethod
    def _commit_result(cid: str, input_id: str, new_state: bytes | None, res: CommitReply) -> CommitResult:
        if res.code < 0:
            raise refused(res.code, cid=cid, step="commit", item=input_id, version=res.extra)
        if res.released:
            started = res.delivery
            delivery = (started.code, claimed_head(started)) if started.code > 0 else None
            return CommitResult(version=res.code, depth=0, released=True, delivery=delivery, tag=res.tag)
        next_id, payload = split_entry(res.next_entry or b"")
        after = res.kept_blob if new_state is None else (new_state or None)
        # The commit deleted the turn journal: the next input's is known to be empty.
        return CommitResult(version=res.code, depth=res.extra,
                            next=Snapshot(payload, next_id, after, res.code, split_all(res.after), res.tag,
                                          journal=False),
                            next_attempts=res.next_attempts, tag=res.tag)

    @store_errors
    def release(self, cid: str, token: int) -> None:
        """Give the lease up (after an error; the caller re-wakes). A no-op when ``token`` is no longer ours."""
        keys = self.keys(cid)
        self._scripts.release(fence=keys.fence, lease=keys.lease, token=token)

    @store_errors
    def renew_lease(self, cid: str, token: int, lease_ms: int) -> bool:
        """The heartbeat of a running turn: ``True`` when the fence still holds ``token`` (the lease is set again
        to expire in ``lease_ms``, even if it had run out: nobody took a newer token); ``False``, changing
        nothing, when another worker took the conversation over."""
        keys = self.keys(cid)
        return self._scripts.renew_lease(fence=keys.fence, lease=keys.lease, token=token, lease_ms=lease_ms)

    @store_errors
    def quarantine(self, cid: str, token: int, blob: bytes, reason: str, *, expected_version: int) -> int:
        """Set an unusable state blob aside (capped list) and clear the state; returns the new version."""
        record = msgpack.packb({"at": time.time(), "reason": reason, "blob": blob}, use_bin_type=True)
        res = self._scripts.quarantine(keys=self.keys(cid), token=token, expected_version=expected_version,
                                       record=record, max_kept=self.limits.quarantine_max)
        if res.code < 0:
            raise refused(res.code, cid=cid, step="quarantine", version=res.version)
        return res.code

    @store_errors
    def read_state(self, cid: str) -> StateRead:
        """The current state, read without a lease (compaction computes off to the side and splices in order)."""
        return StateRead(*self._scripts.read_state(keys=self.keys(cid)))

    @store_errors
    def hold(self, cid: str, ms: int) -> None:
        """Hold the conversation: drains before ``ms`` from now return at once (the retry that set it is
        already scheduled), so wake-ups from new inputs do not start extra retries of a failing input."""
        self._client.set(self.keys(cid).hold, b"1", px=max(1, int(ms)))

    @store_errors
    def try_mark_compacting(self, cid: str, ttl_ms: int) -> bool:
        return bool(self._client.set(self.keys(cid).compacting, b"1", nx=True, px=ttl_ms))

    @store_errors
    def clear_compacting(self, cid: str) -> None:
        self._client.delete(self.keys(cid).compacting)


_IDLE = {Idle.EMPTY: "empty", Idle.BUSY: "busy", Idle.HELD: "held"}  # Begin's status when no lease was taken

