"""The timer loop: every worker process fires the fleet's due timers (inputs sent with ``at=``).

Each pass reads the conversations whose earliest timer is due from the global due index (one ZRANGEBYSCORE) and
fires each with one atomic script (:meth:`~worker.store.timers.TimerStore.fire_due`): the due inputs join the
mailbox through accept's checks, in due order, and a worker is woken by the producers' rule
(:func:`~worker.queue.wakeup.wake_needed`: the mailbox was empty, or a burst's quiet period ended; the sweeper is the
net should that wake-up be lost). Any number of processes run the loop: a timer is
accepted by one of them, once, and the others' passes find nothing due. No Celery countdown is held per timer:
what is held lives in Redis, so a worker's SIGKILL loses nothing and a Redis restart with AOF keeps it.

Why a poll and not a sleep until the next due time: a timer scheduled for sooner by another process would wait
for the sleep to end; a poll of an index that answers in O(log n) costs the same at 10 timers or 10,000
(bench/timers.py measures it), and bounds the lateness by the interval.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from worker import metrics
from worker.errors import StoreUnavailableError
from worker.queue.wakeup import wake_after_accept, wake_needed
from worker.store.interfaces import TimerFiringStore

log = logging.getLogger("parley.timers")

_GAUGE_EVERY_S = 10.0
_MAX_ROUNDS = 20


@dataclass
class TimerLoop:
    """Fires due timers; :meth:`run_once` is one pass, :meth:`run` the loop a worker process runs in a thread.

    ``wake`` is called with a conversation id whose mailbox the pass took from empty to not empty, or whose burst
    hold a fired game event the model answers ended."""

    store: TimerFiringStore
    wake: Callable[[str], None]
    batch: int = 500
    retry_ms: int = 1000
    clock: Callable[[], float] = time.time
    _gauge_at: float = field(default=0.0, init=False)
    _store_down: bool = field(default=False, init=False)

    def run_once(self) -> int:
        """Fire everything due now; returns how many inputs joined their mailboxes."""
        now_ms = int(self.clock() * 1000)
        fired = 0
        for _ in range(_MAX_ROUNDS):  # bounded: the next pass goes on where this one stopped
            due = self.store.due_conversations(now_ms, self.batch)
            for cid, score in due:
                fired += self._fire(cid, score, now_ms)
            if len(due) < self.batch:
                break
        self._update_gauge()
        return fired

    def _fire(self, cid: str, score: float, now_ms: int) -> int:
        res = self.store.fire_due(cid, now_ms, score, retry_ms=self.retry_ms)
        if wake_needed(accepted=res.accepted > 0, was_empty=res.depth_before == 0, ended_hold=res.ended_hold):
            wake_after_accept(self.wake, cid)  # the inputs are in: a broker outage must not stop the pass
        if res.full:
            metrics.TIMERS_HELD_FULL.inc()
            log.warning("due timers held: the mailbox is full", extra={"conversation_id": cid})
        if res.dropped:
            metrics.TIMERS_DROPPED.inc(res.dropped)
        if res.accepted:
            metrics.TIMERS_FIRED.inc(res.accepted)
            now = self.clock()
            for _, due_ms in res.fired:
                metrics.TIMER_LATENESS.observe(max(0.0, now - due_ms / 1000))
        return res.accepted

    def _update_gauge(self) -> None:
        now = time.monotonic()
        if now - self._gauge_at >= _GAUGE_EVERY_S:
            self._gauge_at = now
            metrics.TIMER_CONVERSATIONS.set(self.store.timer_conversations())

    def run(self, stop: threading.Event, interval: float) -> None:
        """Pass every ``interval`` seconds until ``stop`` is set; a failed pass (Redis away) is logged and the next
        one tries again: nothing is lost, the timers wait in Redis."""
        while not stop.wait(interval):
            self.run_guarded()

    def run_guarded(self) -> None:
        """One pass that never raises. A store outage is logged once when it starts and once when it ends: every
        worker passes five times a second, and a traceback each time would bury the log for as long as Redis is
        away. Anything else is unexpected and keeps its traceback."""
        try:
            self.run_once()
        except StoreUnavailableError as exc:
            if not self._store_down:
                self._store_down = True
                log.warning("timer loop: Redis is unavailable (%s); the timers stay held until it is back", exc)
            return
        except Exception:
            log.exception("timer pass failed; the timers stay held")
            return
        if self._store_down:
            self._store_down = False
            log.info("timer loop: Redis is back; firing due timers again")
