"""Fair scheduling: a drain applies a bounded share of one conversation's inputs (``drain_max_turns``, or
``drain_max_seconds``), then hands it back to the queue so the conversations waiting behind it get a turn."""

from __future__ import annotations

import time

from worker.service.drain.hooks.base import DrainHook
from worker.service.drain.run import DrainRun


class Fairness(DrainHook):
    """Hands the conversation back once the drain applied ``max_turns`` inputs or ran ``max_seconds`` (0: no
    bound of that kind); checked after each commit, so a turn is never cut short."""

    def __init__(self, max_turns: int, max_seconds: float) -> None:
        self.max_turns, self.max_seconds = max_turns, max_seconds

    def hand_back(self, run: DrainRun) -> bool:
        limit, seconds = self.max_turns, self.max_seconds
        return bool((limit and run.applied >= limit) or (seconds and time.monotonic() - run.started >= seconds))
