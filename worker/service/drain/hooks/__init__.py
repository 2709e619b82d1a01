"""The drain's hooks, one file per feature, and the one place that assembles them from the configuration."""

from __future__ import annotations

from worker.observability import tracing
from worker.service.config import ServiceConfig
from worker.service.drain.hooks.base import DrainHook, Hooks, Prepare
from worker.service.drain.hooks.budget import DailyBudget
from worker.service.drain.hooks.bursts import Bursts, Merge
from worker.service.drain.hooks.durable_record import DurableRecord
from worker.service.drain.hooks.fairness import Fairness
from worker.service.drain.hooks.game_context import GameContextHook
from worker.service.drain.hooks.handoff import Paused
from worker.service.drain.hooks.opt_out import OptOutHook
from worker.service.drain.hooks.photos import Photos
from worker.service.drain.hooks.receipts import Receipts
from worker.service.drain.hooks.traces import TurnSpans
from worker.service.presence import Presence
from worker.store.interfaces import DrainStore

__all__ = ["Bursts", "DailyBudget", "DrainHook", "DurableRecord", "Fairness", "GameContextHook", "Hooks", "Merge",
           "OptOutHook", "Paused", "Photos", "Prepare", "Receipts", "TurnSpans", "build_hooks"]


def build_hooks(store: DrainStore, config: ServiceConfig, presence: Presence) -> list[DrainHook]:
    """The hooks of the features ``config`` turns on, in the order they are asked (the player's opt-out first: it is
    confirmed whatever holds the turn; then a pause: no other short answer goes out while a person has taken over;
    the budget before a photo's short answer). A feature that is off is left out, so it costs a turn nothing."""
    hooks: list[DrainHook] = [Paused(store)]
    opt_out = config.opt_out
    if opt_out.phrases or opt_out.in_phrases:
        hooks.insert(0, OptOutHook(store, opt_out))
    if config.budget.daily_token_budget:
        hooks.append(DailyBudget(store, config.budget.daily_token_budget, config.budget.token_budget_reply))
    hooks.append(Photos())
    if config.burst.peek:
        hooks.append(Bursts(config.burst))
    if config.burst.merge:
        hooks.append(Merge(store, config.burst))
    if presence.enabled:
        hooks.append(Receipts(presence))
    if config.record:
        hooks.append(DurableRecord(config.model_name))
    if config.context_source is not None:
        hooks.append(GameContextHook(store, config.context_source, config.game_context))
    if config.drain.max_turns or config.drain.max_seconds:
        hooks.append(Fairness(config.drain.max_turns, config.drain.max_seconds))
    if tracing.enabled():
        hooks.append(TurnSpans())
    return hooks
