"""The pace every worker shares, kept in Redis: one slot per message from the sender number (its throughput) to one
recipient (the pair rate), taken by a GCRA script on Redis's clock (``lua/pace.lua``). The same script paces each
rate-limited token of the producers' API over every ingress process."""

from __future__ import annotations

from worker.store.answers import Pace
from worker.store.core import StoreCore
from worker.store.keys import ApiTokenKeys, PaceKeys
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

    @store_errors
    def api_slot(self, digest: str, per_second: float) -> float:
        """Take a request slot of the API token of ``digest`` (:attr:`~worker.settings.api_tokens.Grant.digest`):
        0 when taken, else the seconds until one is free (nothing taken). A burst of ``per_second`` requests (at
        least one) may come at once, then one every ``1 / per_second`` seconds; one round trip."""
        interval = max(1, round(1_000_000 / per_second))
        burst = max(1, int(per_second))
        res = self._scripts.take_slot(bucket=ApiTokenKeys(self.prefix, digest).rate, interval_us=interval,
                                      tolerance_us=(burst - 1) * interval)
        return 0.0 if res.reserved else res.wait_us / 1_000_000
