"""The pace every worker shares, kept in Redis: one slot per message from the sender number (its throughput) to one
recipient (the pair rate), taken by a GCRA script on Redis's clock (``lua/pace.lua``)."""

from __future__ import annotations

from worker.store.answers import Pace
from worker.store.core import StoreCore
from worker.store.keys import PaceKeys
from worker.store.limits import PaceLimits
from worker.store.redis_errors import store_errors

_BY = {0: "none", 1: "number", 2: "recipient"}


class SharedPaceStore(StoreCore):
    """The shared pace (:class:`~worker.store.interfaces.PaceStore`)."""

    @store_errors
    def pace(self, sender: str, recipient: str, limits: PaceLimits, *, max_wait: float) -> Pace:
        """Take the next slot for one message from ``sender`` (the phone number id) to ``recipient`` when the
        recipient may have one now and the number's comes within ``max_wait`` seconds; one round trip."""
        rate, rate_tol, pair, pair_tol = limits.intervals_us()
        res = self._scripts.pace(keys=PaceKeys(self.prefix, sender), recipient=recipient, rate_interval_us=rate,
                                 rate_tolerance_us=rate_tol, recipient_interval_us=pair,
                                 recipient_tolerance_us=pair_tol, max_wait_us=max(0, round(max_wait * 1_000_000)))
        return Pace(res.reserved, res.wait_us / 1_000_000, _BY.get(res.by, "none"))
