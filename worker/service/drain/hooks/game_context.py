"""The game's live context (the tool manifest's ``context`` entry or ``PARLEY_CONTEXT``): fetched at the start of
every model turn and added to that turn's system prompt, never stored (:mod:`worker.service.live_context`).

Only model turns ask: an event that is not answered, a reset, a splice or a short answer in place of a turn
(the budget's, a photo's) calls no model and fetches nothing.
"""

from __future__ import annotations

from worker.service.drain.burst import Pending
from worker.service.drain.hooks.base import DrainHook
from worker.service.drain.run import DrainRun
from worker.service.live_context import ContextSource, LiveContext
from worker.settings import GameContext
from worker.store.interfaces import DrainStore


class GameContextHook(DrainHook):
    """Adds the game's context for the turn of the head input to the turn's system prompt."""

    def __init__(self, store: DrainStore, source: ContextSource, knobs: GameContext) -> None:
        self.live = LiveContext(source, store, max_age=knobs.max_age_seconds, max_chars=knobs.max_chars)

    def system(self, run: DrainRun, inputs: tuple[Pending, ...]) -> str | None:
        return self.live.for_turn(run.cid, inputs[0].id, run.token)
