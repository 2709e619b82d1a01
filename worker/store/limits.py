"""The store's bounds (:class:`StoreLimits`, on everything that could grow) and the shared pace's two rates
(:class:`PaceLimits`): what a deployment configures, passed in by :mod:`worker.runtime`."""

from __future__ import annotations

from dataclasses import dataclass


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
    max_timers: int = 1000  # inputs one conversation may hold until they are due
    recall_max_bytes: int = 0  # bytes of one conversation's archived batches, the oldest go first; 0: unbounded


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
