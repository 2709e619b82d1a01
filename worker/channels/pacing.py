"""The pace every worker shares, so that the fleet together stays under WhatsApp's limits: the sender number's
throughput (130429 above it) and the pair rate of one recipient (131056 above it).

Each send first takes a slot from two GCRA buckets in Redis, in one script on Redis's clock
(:meth:`~worker.store.shared_pace.SharedPaceStore.pace`). A number's slot that comes within ``max_sleep`` is reserved and
waited for in the worker: short waits are the common case at the limit (1/80 s apart), and a reserved slot needs
no second round trip. A player whose pair budget is spent is never reserved ahead (it would hold the number's
schedule for everyone): the worker sleeps a short wait and asks again. A longer wait of either kind takes nothing
and becomes :class:`RetryLater` with that countdown, so no worker slot is held while it passes. The parts of one
reply still go in order: one deliverer holds the conversation's delivery lease and sends them one after the other.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from worker import metrics
from worker.errors import RetryLater
from worker.store.interfaces import PaceStore
from worker.store.limits import PaceLimits

log = logging.getLogger("parley.service")

MAX_ROUNDS = 3


class Pacer:
    """Admits one send at a time from ``sender`` (the phone number id) under ``limits``: the sender's own
    (:class:`~worker.channels.whatsapp.WhatsAppSender` keeps one). With several numbers each number's sender has its
    own pacer, so each number has its own throughput bucket and its own pair buckets, as the platform counts them
    (:mod:`worker.settings.business_numbers`)."""

    def __init__(self, store: PaceStore, sender: str, limits: PaceLimits, *, max_sleep: float = 2.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.store = store
        self.sender = sender
        self.limits = limits
        self.max_sleep = max_sleep
        self._sleep = sleep

    def admit(self, recipient: str) -> float:
        """Wait for the next slot to ``recipient``; returns the seconds waited.

        Raises :class:`RetryLater` (nothing taken) when the slot is more than ``max_sleep`` away."""
        waited = 0.0
        # Asking again after a recipient's wait finds the slot unless another conversation to the same player took
        # it meanwhile: a few rounds, then the wait goes to a later task rather than holding this worker.
        for _ in range(MAX_ROUNDS):
            pace = self.store.pace(self.sender, recipient, self.limits, max_wait=self.max_sleep)
            if pace.wait > self.max_sleep:
                break
            if pace.wait > 0:
                metrics.PACE_WAITS.labels(pace.by, "sleep").inc()
                metrics.PACE_WAIT_SECONDS.observe(pace.wait)
                self._sleep(pace.wait)
                waited += pace.wait
            if pace.reserved:
                return waited
        metrics.PACE_WAITS.labels(pace.by, "retry").inc()
        metrics.PACE_WAIT_SECONDS.observe(pace.wait)
        log.info("send put off by the pace", extra={"limit": pace.by, "wait": round(pace.wait, 3)})
        raise RetryLater(f"paced by the {pace.by} limit for {pace.wait:.2f}s", max(pace.wait, 0.05))
