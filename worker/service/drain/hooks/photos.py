"""Photos: a photo alone that the model cannot see gets the short answer, in its place, instead of a turn.

The turn prepares each chat message once (:class:`~worker.service.drain.media.MediaPreparer`, cached per turn), so
asking here costs no second fetch. A photo can come in any conversation, so this hook is always in the list.
"""

from __future__ import annotations

from worker.envelopes.inputs import InputKind
from worker.service.drain.burst import Pending
from worker.service.drain.hooks.base import DrainHook, Prepare
from worker.service.drain.outcomes import Notice, Outcome
from worker.service.drain.run import DrainRun


class Photos(DrainHook):
    """A lone input whose preparation is a notice (a photo the model cannot see, no caption) is answered so."""

    def before_turn(self, run: DrainRun, inputs: tuple[Pending, ...], prepare: Prepare) -> Outcome | None:
        if len(inputs) != 1 or inputs[0].env.kind is not InputKind.MESSAGE:  # an event the model answers carries no photo
            return None
        notice = prepare(inputs[0]).notice
        return Notice(inputs[0].env, notice, "unreadable_media") if notice is not None else None
