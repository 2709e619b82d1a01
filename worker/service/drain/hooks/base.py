"""The hooks a feature of the drain plugs into: a base whose methods all do nothing, and the list that calls them.

As dramatiq builds its middleware: a feature (the daily budget, bursts, photos, presence, the durable record,
fairness, the game's live context) is a subclass that overrides the points it needs, in a file of its own, and the service assembles the
list from its configuration (:func:`worker.service.drain.hooks.build_hooks`). A feature that is off is not in
the list, and a point no hook overrides costs nothing: :class:`Hooks` keeps, per point, only the hooks that
override it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext

from worker.conversation.results import TurnResult
from worker.envelopes.inputs import ReplyRecord
from worker.service.drain.burst import Pending
from worker.service.drain.media import Prepared
from worker.service.drain.outcomes import Defer, Outcome
from worker.service.drain.run import DrainRun
from worker.service.drain.stored_journal import StoreJournal
from worker.store.answers import Snapshot

Prepare = Callable[[Pending], Prepared]
"""The turn's preparation of one chat message (cached per turn: a photo is fetched once)."""

_NO_CONTEXT = nullcontext()


class DrainHook:
    """Base class of the drain's hooks: every point does nothing (or has no opinion) unless overridden."""

    def before_turn(self, run: DrainRun, inputs: tuple[Pending, ...], prepare: Prepare) -> Outcome | None:
        """Before the model is asked: an outcome in the place of the turn (a notice), or None to go on."""
        return None

    def take(self, run: DrainRun, head: Pending, snap: Snapshot,
             journal: StoreJournal) -> tuple[Pending, ...] | Defer | None:
        """The inputs the turn at ``head`` takes in, or a :class:`Defer` to put it off; None: no opinion."""
        return None

    def system(self, run: DrainRun, inputs: tuple[Pending, ...]) -> str | None:
        """Once per model turn, before the model is asked: text added to this turn's system prompt (fresh every
        turn, never stored), or None."""

    def notice(self, run: DrainRun, notice: Pending) -> Outcome | None:
        """Before a notice input's short answer is queued: an outcome in its place, or None to go on."""
        return None

    def again(self, run: DrainRun, inputs: tuple[Pending, ...], result: TurnResult, merges: int,
              journal: StoreJournal) -> tuple[Pending, ...] | None:
        """After the model answered ``inputs``: the inputs to answer instead (the answer is thrown away), or None."""
        return None

    def model_call(self, run: DrainRun, inputs: tuple[Pending, ...]) -> AbstractContextManager[object]:
        """A context held while the model answers ``inputs``."""
        return _NO_CONTEXT

    def deferred(self, run: DrainRun, defer: Defer) -> None:
        """After a turn was put off (the lease given up)."""

    def entry(self, run: DrainRun, snap: Snapshot, outcome: Outcome, reply: ReplyRecord | None) -> bytes | None:
        """The durable record's entry for the commit that applies ``outcome`` (``reply``: the reply it queues)."""
        return None

    def hand_back(self, run: DrainRun) -> bool:
        """After a commit with inputs still waiting: whether to give the conversation back to the queue."""
        return False


def _overriding(hooks: Sequence[DrainHook], point: str) -> tuple[DrainHook, ...]:
    base = getattr(DrainHook, point)
    return tuple(h for h in hooks if getattr(type(h), point) is not base)


class Hooks:
    """Calls a list of hooks at each point, in the list's order; each point only the hooks that override it."""

    def __init__(self, hooks: Sequence[DrainHook] = ()) -> None:
        self.all = tuple(hooks)
        self._before_turn = _overriding(hooks, "before_turn")
        self._take = _overriding(hooks, "take")
        self._notice = _overriding(hooks, "notice")
        self._again = _overriding(hooks, "again")
        self._system = _overriding(hooks, "system")
        self._model_call = _overriding(hooks, "model_call")
        self._deferred = _overriding(hooks, "deferred")
        self._entry = _overriding(hooks, "entry")
        self._hand_back = _overriding(hooks, "hand_back")

    def at(self, point: str) -> tuple[DrainHook, ...]:
        """The hooks called at ``point`` (the name of a :class:`DrainHook` method): those that override it."""
        return tuple(getattr(self, f"_{point}"))

    def before_turn(self, run: DrainRun, inputs: tuple[Pending, ...], prepare: Prepare) -> Outcome | None:
        for h in self._before_turn:
            outcome = h.before_turn(run, inputs, prepare)
            if outcome is not None:
                return outcome
        return None

    def take(self, run: DrainRun, head: Pending, snap: Snapshot,
             journal: StoreJournal) -> tuple[Pending, ...] | Defer:
        for h in self._take:
            taken = h.take(run, head, snap, journal)
            if taken is not None:
                return taken
        return (head,)

    def system(self, run: DrainRun, inputs: tuple[Pending, ...]) -> str | None:
        texts = [t for t in (h.system(run, inputs) for h in self._system) if t]
        return "\n\n".join(texts) or None

    def notice(self, run: DrainRun, notice: Pending) -> Outcome | None:
        for h in self._notice:
            outcome = h.notice(run, notice)
            if outcome is not None:
                return outcome
        return None

    def again(self, run: DrainRun, inputs: tuple[Pending, ...], result: TurnResult, merges: int,
              journal: StoreJournal) -> tuple[Pending, ...] | None:
        for h in self._again:
            grown = h.again(run, inputs, result, merges, journal)
            if grown is not None:
                return grown
        return None

    def model_call(self, run: DrainRun, inputs: tuple[Pending, ...]) -> AbstractContextManager[object]:
        if not self._model_call:
            return _NO_CONTEXT
        if len(self._model_call) == 1:
            return self._model_call[0].model_call(run, inputs)
        stack = ExitStack()
        try:
            for h in self._model_call:
                stack.enter_context(h.model_call(run, inputs))
        except BaseException:
            stack.close()
            raise
        return stack

    def deferred(self, run: DrainRun, defer: Defer) -> None:
        for h in self._deferred:
            h.deferred(run, defer)

    def entry(self, run: DrainRun, snap: Snapshot, outcome: Outcome, reply: ReplyRecord | None) -> bytes | None:
        for h in self._entry:
            entry = h.entry(run, snap, outcome, reply)
            if entry is not None:
                return entry
        return None

    def hand_back(self, run: DrainRun) -> bool:
        return any(h.hand_back(run) for h in self._hand_back)
