"""The inlets' waits after a failure: a round of the stream or a RabbitMQ connection that failed is tried again
after a pause that doubles up to half a minute, cut short by a stop."""

from __future__ import annotations

import time
from collections.abc import Callable


def backoff(failures: int, *, first: float = 1.0, most: float = 30.0) -> float:
    """Seconds to wait after ``failures`` rounds in a row failed: ``first``, doubling, up to ``most``."""
    return float(min(first * 2 ** max(failures - 1, 0), most))


def pause(seconds: float, stopping: Callable[[], bool]) -> bool:
    """Wait ``seconds`` unless asked to stop first (True then): a backoff grows to half a minute, and a SIGTERM
    should not wait that long."""
    deadline = time.monotonic() + seconds
    while not stopping():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(left, 0.2))
    return True
