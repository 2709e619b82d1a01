"""What the platform's rules need from Redis: the player's last message (WhatsApp's customer-service window) and
the pace every worker shares (the sender number's throughput and the pair rate of each recipient)."""

from __future__ import annotations

from dataclasses import dataclass

from worker.store.base import StoreBase, store_errors
from worker.store.keys import PaceKeys


@dataclass(frozen=True)
class PaceLimits:
    """Two GCRA limits: ``per_second`` messages a second from the sender number with bursts of ``burst``, and
    ``recipient_per_second`` to one recipient with bursts of ``recipient_burst``. A rate of 0 turns its limit off."""

    per_second: float = 80.0
    burst: int = 10
    recipient_per_second: float = 10 / 60
    recipient_burst: int = 20

    def intervals_us(self) -> tuple[int, int, int, int]:
        """(number interval, number tolerance, recipient interval, recipient tolerance) in µs; the tolerance lets
        ``burst`` messages go at once after a quiet spell."""
        rate = _interval_us(self.per_second)
        pair = _interval_us(self.recipient_per_second)
        return rate, rate * max(0, self.burst - 1), pair, pair * max(0, self.recipient_burst - 1)


def _interval_us(per_second: float) -> int:
    return round(1_000_000 / per_second) if per_second > 0 else 0


@dataclass(frozen=True)
class Pace:
    """One answer of the pacer: ``reserved`` when the send may go after ``wait`` seconds (the slot is taken);
    otherwise nothing was taken: ask again after ``wait`` (the recipient's pair budget needs it, or the number's
    next slot is further away than the caller would sleep). ``by`` names the limit that set the wait: ``number``,
    ``recipient`` or ``none``."""

    reserved: bool
    wait: float
    by: str


_BY = {0: "none", 1: "number", 2: "recipient"}


class RulesStore(StoreBase):
    """The customer-service window's clock and the shared pace."""

    @store_errors
    def last_inbound(self, cid: str) -> float | None:
        """When the player's last message was accepted (seconds since the epoch), or None when none is known (no
        message since this release, or the conversation was deleted or expired idle)."""
        raw = self._r.get(self.keys(cid).inbound)
        return int(raw) / 1000 if raw is not None else None

    @store_errors
    def pace(self, sender: str, recipient: str, limits: PaceLimits, *, max_wait: float) -> Pace:
        """Take the next slot for one message from ``sender`` (the phone number id) to ``recipient`` when the
        recipient may have one now and the number's comes within ``max_wait`` seconds; one round trip, on Redis's
        clock (see :data:`worker.store.lua.PACE`)."""
        rate, rate_tol, pair, pair_tol = limits.intervals_us()
        res = self._scripts.pace(k=PaceKeys(self.prefix, sender), recipient=recipient, rate_interval_us=rate,
                                 rate_tolerance_us=rate_tol, recipient_interval_us=pair,
                                 recipient_tolerance_us=pair_tol, max_wait_us=max(0, round(max_wait * 1_000_000)))
        return Pace(res.reserved, res.wait_us / 1_000_000, _BY.get(res.by, "none"))
