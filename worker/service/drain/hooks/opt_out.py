"""A player's opt-out: an opt-out phrase (``PARLEY_OPT_OUT_PHRASES``, matched as reset phrases are, inside a burst
too) gets one confirmation and no model call, and marks the player opted out; an opt-in phrase, or with
``PARLEY_OPT_OUT_UNTIL_MESSAGE`` any later message, clears the mark. While it stands, what the business starts (an
answered event, a timer, an operator's message) is applied with nothing sent: the decider's part
(:mod:`worker.service.drain.decide`); a template is refused at delivery (:mod:`worker.store.identities`).

Always in the list, and first: the player's STOP is confirmed whatever else holds the turn (a pause, the budget).
"""

from __future__ import annotations

from collections.abc import Sequence

from worker import metrics
from worker.conversation.resets import normalise
from worker.envelopes.inputs import InputKind
from worker.service.drain.burst import Pending, answers_event
from worker.service.drain.hooks.base import DrainHook, Prepare
from worker.service.drain.outcomes import Notice, Outcome
from worker.service.drain.run import DrainRun
from worker.settings import OptOut
from worker.store.interfaces import DrainStore


def last_phrase_at(inputs: Sequence[Pending], phrases: set[str]) -> int | None:
    """The index of the last of ``inputs`` that is the player's text (not a photo's caption) equal to one of
    ``phrases`` once normalised (:func:`worker.conversation.resets.normalise`), or None."""
    if not phrases:
        return None
    return max((i for i, p in enumerate(inputs) if p.env.kind is InputKind.MESSAGE and p.env.media is None
                and normalise(p.env.text or "") in phrases), default=None)


class OptOutHook(DrainHook):
    """Opts a player out and in (see the module)."""

    def __init__(self, store: DrainStore, policy: OptOut) -> None:
        self.store, self.policy = store, policy
        self._out = {n for n in (normalise(p) for p in policy.phrases) if n}
        self._in = {n for n in (normalise(p) for p in policy.in_phrases) if n} - self._out

    def before_turn(self, run: DrainRun, inputs: tuple[Pending, ...], prepare: Prepare) -> Outcome | None:
        if answers_event(inputs):  # the game's, not the player's words (the decider holds it back when opted out)
            return None
        out_at, in_at = last_phrase_at(inputs, self._out), last_phrase_at(inputs, self._in)
        also = [p.env for p in inputs[1:]]
        if out_at is not None and (in_at is None or out_at > in_at):
            if self.store.set_opt_out(run.cid, "stop", True):
                metrics.OPT_OUTS.labels("stop").inc()
            return Notice(inputs[0].env, self.policy.reply, "opt_out", also=also)
        if in_at is None and not self.policy.until_message:
            return None
        if self._opt_in(run, inputs[0].id, "start" if in_at is not None else "message") and in_at == len(inputs) - 1:
            return Notice(inputs[0].env, self.policy.in_reply, "opt_in", also=also)  # nothing after it to answer
        return None

    def notice(self, run: DrainRun, notice: Pending) -> Outcome | None:
        """A message Parley cannot read is still the player writing: with ``until_message`` it opts them in."""
        if self.policy.until_message:
            self._opt_in(run, notice.id, "message")
        return None

    def _opt_in(self, run: DrainRun, head_id: str, how: str) -> bool:
        """Clear the player's opt-out; True when there was one. The drain's first turn knows from its begin whether
        there is (no round trip when there is none); a later turn of the same drain asks the store."""
        if run.opt_out_for(head_id) is False or not self.store.set_opt_out(run.cid, "stop", False):
            return False
        metrics.OPT_OUTS.labels(how).inc()
        return True
