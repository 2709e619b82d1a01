"""Timers: inputs held in Redis until they are due, then accepted into the conversation's mailbox.

A producer's ``send_event(..., at=when)`` (and ``send_message``/``reset`` alike) is validated in full and held under
the conversation's hash tag: ``timers`` (zset: message id -> due ms) and ``timed`` (hash: message id -> the mailbox
entry, with two flag characters). The global ``timers-due`` zset lists the conversations holding timers, scored by
their earliest due time; every worker process's timer loop (:mod:`worker.service.timer_loop`) reads it and fires what
is due with one atomic script per conversation (:meth:`TimerStore.fire_due`), which accepts the due inputs into the
mailbox with the checks of ``accept`` (dedupe by message id, the mailbox's bound) and moves the conversation's index
score on. Any number of workers may fire the same conversation at once: each timer is accepted by exactly one call.

The due index may be early, never late: a score lower than the conversation's earliest timer costs one firing pass
that finds nothing due, and corrects it. On a standalone or Sentinel-managed Redis the scripts keep the index in the
same step. On a Cluster (the index is in another slot) the scheduler lowers it before its script (a crash between
them leaves an early score, never a timer without one) and again after it; the firing pass moves it with a
compare-and-set on the score it read, then lowers it to the conversation's earliest timer read after that, so a
timer scheduled while a pass runs is never left behind a later score.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.errors import InboxFullError
from worker.store.codes import AcceptCode
from worker.store.core import StoreCore
from worker.store.entry_codec import join_entry, split_entry
from worker.store.redis_errors import store_errors
from worker.store.script_args import FireArgs
from worker.store.script_replies import FireReply


@dataclass(frozen=True)
class Scheduled:
    """What a scheduling did: ``duplicate`` when the message id is held already or was accepted before (nothing
    new is held); ``held``: the timers the conversation holds after it."""

    scheduled: bool
    duplicate: bool
    held: int


@dataclass(frozen=True)
class Timer:
    """One held input: its message id, when it is due (ms since the epoch) and its envelope."""

    message_id: str
    due_ms: int
    envelope: bytes


class TimerStore(StoreCore):
    """Holding inputs until they are due, firing them, cancelling them."""

    @store_errors
    def schedule(self, cid: str, envelope: bytes, input_id: str, due_ms: int, *, inbound: bool = False,
                 reset: bool = False, ends_burst: bool = False) -> Scheduled:
        """Hold an input until ``due_ms``, unless its id is held or was accepted before. ``inbound``,
        ``reset`` and ``ends_burst`` are what the input does when it is accepted (see
        :meth:`~worker.store.accepts.AcceptStore.accept`; a reset drops the timers still held behind it).

        Raises :class:`~worker.errors.InboxFullError` when the conversation holds ``limits.max_timers`` timers.
        """
        keys = self.keys(cid)
        flags = (b"1" if inbound else b"0") + (b"r" if reset else b"e" if ends_burst else b"-")
        index = self.global_keys.timers_due
        if self._cluster:
            self._client.zadd(index, {cid: due_ms}, lt=True)
        code, held = self._scripts.schedule(keys=keys, index=None if self._cluster else index, input_id=input_id,
                                            held=flags + join_entry(input_id, envelope), due_ms=due_ms,
                                            max_timers=self.limits.max_timers)
        if self._cluster and code == AcceptCode.ACCEPTED:
            self._client.zadd(index, {cid: due_ms}, lt=True)
        if code == AcceptCode.FULL:
            raise InboxFullError(f"conversation {cid} holds {held} timers; the limit is {self.limits.max_timers}")
        return Scheduled(code == AcceptCode.ACCEPTED, code == AcceptCode.DUPLICATE, held)

    @store_errors
    def cancel_scheduled(self, cid: str, input_id: str) -> bool:
        """Drop a held input that is not yet due; ``False`` when none with that id is held."""
        return self._scripts.cancel_timer(keys=self.keys(cid), input_id=input_id)

    @store_errors
    def scheduled(self, cid: str) -> list[Timer]:
        """The conversation's held inputs, earliest first."""
        keys = self.keys(cid)
        rows = self._client.zrange(keys.timers, 0, -1, withscores=True)
        if not rows:
            return []
        bodies = self._client.hmget(keys.timed, [member for member, _ in rows])
        out = []
        for (member, score), held in zip(rows, bodies, strict=True):
            if held is not None:
                out.append(Timer(member.decode("utf-8", "replace"), int(score), split_entry(bytes(held)[2:])[1]))
        return out

    @store_errors
    def scheduled_count(self, cid: str) -> int:
        """How many inputs the conversation holds until they are due (one ZCARD: what a summary shows)."""
        return int(self._client.zcard(self.keys(cid).timers))

    @store_errors
    def due_conversations(self, now_ms: int, limit: int = 500) -> list[tuple[str, float]]:
        """Conversations with a timer that may be due by ``now_ms``, with the index score read (earliest first)."""
        rows = self._client.zrangebyscore(self.global_keys.timers_due, "-inf", now_ms, start=0, num=limit,
                                          withscores=True)
        return [(member.decode("utf-8", "replace"), float(score)) for member, score in rows]

    @store_errors
    def timer_conversations(self) -> int:
        """How many conversations hold timers (the due index's size)."""
        return int(self._client.zcard(self.global_keys.timers_due))

    @store_errors
    def fire_due(self, cid: str, now_ms: int, index_score: float, *, batch: int = 100,
                 retry_ms: int = 1000) -> FireReply:
        """Accept up to ``batch`` of the conversation's timers due by ``now_ms`` into its mailbox, earliest first
        (``index_score``: the due index's score the caller read). A full mailbox keeps them held and looks again
        after ``retry_ms``."""
        keys = self.keys(cid)
        index = self.global_keys.timers_due
        args = FireArgs(now_ms, self.limits.max_inbox, self.limits.dedupe_max_ids, self.limits.dedupe_ms,
                        self.limits.idle_ttl_ms, batch, "" if self._cluster else cid, retry_ms)
        if not self._cluster:
            return self._scripts.fire_timers(keys=keys, globals_=(self.global_keys.pending, index),
                                             ttl_keys=self._ttl_keys(keys), args=args)
        # The sweeper must know of the conversation before its mailbox grows (as accept does on a Cluster), and its
        # idle clock restarts only when work appeared in an empty mailbox (see accept.lua).
        self._client.zadd(self.global_keys.pending, {cid: now_ms}, nx=True)
        res = self._scripts.fire_timers(keys=keys, globals_=None, ttl_keys=self._ttl_keys(keys), args=args)
        if res.accepted and res.depth_before == 0:
            self._client.zadd(self.global_keys.pending, {cid: now_ms})
        self._scripts.set_if_score(zset=index, member=cid, score=index_score,
                                   new_score=None if res.earliest < 0 else res.earliest)
        first = self._client.zrange(keys.timers, 0, 0, withscores=True)
        if first:  # a timer scheduled while this pass ran: never behind a later score (a full mailbox waits)
            self._client.zadd(index, {cid: max(int(first[0][1]), res.earliest if res.full else 0)}, lt=True)
        return res
