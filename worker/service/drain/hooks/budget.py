"""The daily token budget: a conversation past its tokens for the UTC day gets the configured short answer instead
of a model call (abuse and cost control; ``PARLEY_DAILY_TOKEN_BUDGET``)."""

from __future__ import annotations

from worker import metrics
from worker.service.drain.burst import Pending
from worker.service.drain.hooks.base import DrainHook, Prepare
from worker.service.drain.outcomes import Notice, Outcome
from worker.service.drain.run import DrainRun
from worker.store.interfaces import DrainStore


class DailyBudget(DrainHook):
    """Answers a turn with ``reply`` when the conversation has used ``budget`` tokens today."""

    def __init__(self, store: DrainStore, budget: int, reply: str) -> None:
        self.store, self.budget, self.reply = store, budget, reply

    def before_turn(self, run: DrainRun, inputs: tuple[Pending, ...], prepare: Prepare) -> Outcome | None:
        if self.store.tokens_today(run.cid) < self.budget:
            return None
        metrics.BUDGET_REFUSALS.inc()
        return Notice(inputs[0].env, self.reply, "budget", also=[p.env for p in inputs[1:]])
