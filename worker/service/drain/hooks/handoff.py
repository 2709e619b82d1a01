"""The pause: while a person has taken the conversation over, a turn is withheld instead of asking the model, and a
notice input (the short answer to a message Parley cannot read, or a producer's) is withheld too.

Always in the list, and first (before the daily budget's or a photo's short answer: while paused no notice goes out
either). It reads the conversation's pause flag at each turn point: the drain's first one uses the flag as the
drain's begin read it (the same round trip as the lease and the state), each later one reads it with a GET. The flag
takes effect at once, so the race with a turn in progress has three cases, each answered once and never lost:

- the pause lands before the turn point: the turn's inputs are withheld (applied to the state, no reply);
- it lands while the model answers: that answer goes out as usual (the model call has started; throwing the answer
  away could hide what its tools did to the game), and the next turn is withheld;
- a turn that crashed after recording model rounds or tool results (its journal holds them) is retried as it was,
  pause or not: it had started answering before the pause, and its tools may have acted.
"""

from __future__ import annotations

import logging

from worker import metrics
from worker.service.drain.burst import Pending
from worker.service.drain.hooks.base import DrainHook, Prepare
from worker.service.drain.outcomes import Outcome, Withheld
from worker.service.drain.run import DrainRun
from worker.service.drain.stored_journal import StoreJournal
from worker.store.answers import Pause
from worker.store.interfaces import DrainStore

log = logging.getLogger("parley.service")


class Paused(DrainHook):
    """Withholds the turn of a paused conversation (see the module)."""

    def __init__(self, store: DrainStore) -> None:
        self.store = store

    def before_turn(self, run: DrainRun, inputs: tuple[Pending, ...], prepare: Prepare) -> Outcome | None:
        pause = self._pause(run, inputs[0].id)
        if pause is None:
            return None
        head = inputs[0]
        if StoreJournal(self.store, run.cid, head.id, run.token).has_entries():
            metrics.PAUSED_TURNS.labels("finished").inc()
            log.info("paused, but the turn had started before the pause: finishing it",
                     extra={"conversation_id": run.cid, "message_id": head.id})
            return None
        return Withheld(inputs, pause.until)

    def notice(self, run: DrainRun, notice: Pending) -> Outcome | None:
        """No short answer either while paused (invariant 13's one exception): the notice is applied with no reply,
        the state as it was (``state`` None keeps it)."""
        pause = self._pause(run, notice.id)
        return None if pause is None else Withheld((notice,), pause.until)

    def _pause(self, run: DrainRun, head_id: str) -> Pause | None:
        read, pause = run.pause_for(head_id)
        return pause if read else self.store.paused(run.cid)
