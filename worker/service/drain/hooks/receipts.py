"""Presence: read marks and the typing indicator while a burst waits and while the model thinks (best effort,
off the turn's thread; :mod:`worker.service.presence`). In the list only when presence is on."""

from __future__ import annotations

from contextlib import AbstractContextManager

from worker.envelopes.inputs import InputKind
from worker.service.drain.burst import Pending
from worker.service.drain.hooks.base import DrainHook
from worker.service.drain.outcomes import Defer
from worker.service.drain.run import DrainRun
from worker.service.presence import Presence


class Receipts(DrainHook):
    """Shows the player that someone is there: the indicator during the model call, read marks on a deferral."""

    def __init__(self, presence: Presence) -> None:
        self.presence = presence

    def model_call(self, run: DrainRun, inputs: tuple[Pending, ...]) -> AbstractContextManager[object]:
        return self.presence.typing(run.cid, inputs[-1].id)  # refreshed while the model thinks

    def deferred(self, run: DrainRun, defer: Defer) -> None:
        # The player sees their messages read and someone typing while the burst waits.
        self.presence.acknowledge(run.cid, [p.id for p in defer.inputs if p.env.kind is InputKind.MESSAGE])
