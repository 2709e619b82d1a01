"""Bursts and double texts: which inputs one turn takes in, and whether a stale answer is thrown away.

:class:`Bursts` (``PARLEY_BURST_QUIET_SECONDS`` > 0, or merging on) starts a turn at a chat message with the
messages queued behind it (:mod:`worker.service.drain.burst` decides), or puts it off while the player is still typing.
A retried turn takes in the inputs its crashed run recorded in the journal.

:class:`Merge` (``PARLEY_DOUBLE_TEXT=merge``): when chat messages arrived behind the turn while the model answered,
the answer is stale. It is thrown away (counted) and the turn runs again over the same state with them included,
at most ``max_merges`` times, and never once a person has paused the conversation (the answer goes out, the new
messages are withheld next). Only an answer whose run called no tools is thrown away: a tool may have acted on the
game, and the model must see what it did, so such an answer goes out and the new messages are answered next (as
with ``queue``). Since such a run recorded nothing in the journal, a crash after a merge replays nothing stale:
the journal holds the merged burst's inputs, recorded before the new run.
"""

from __future__ import annotations

import logging
import time

from worker import metrics
from worker.conversation.results import TurnResult
from worker.service.drain import burst
from worker.service.drain.burst import BurstPolicy, Pending
from worker.service.drain.hooks.base import DrainHook
from worker.service.drain.outcomes import Defer
from worker.service.drain.run import DrainRun
from worker.service.drain.stored_journal import StoreJournal
from worker.store.answers import Snapshot
from worker.store.interfaces import DrainStore

log = logging.getLogger("parley.service")


class Bursts(DrainHook):
    """Takes in the burst a chat message at the head starts, or defers the turn while it is being typed."""

    def __init__(self, policy: BurstPolicy) -> None:
        self.policy = policy

    def take(self, run: DrainRun, head: Pending, snap: Snapshot,
             journal: StoreJournal) -> tuple[Pending, ...] | Defer | None:
        policy = self.policy
        after = burst.decode_after(snap.after, run.cid)
        ids = journal.recorded_burst()
        if ids is not None:
            again = burst.recorded(head, after, ids)
            if again is not None:
                return again
        if journal.has_entries():
            return (head,)  # a crashed run of a lone message: replay it as it was
        decision = burst.decide(head, after, policy, time.time(), complete=len(snap.after) < policy.peek)
        if decision.wait > 0:
            return Defer(decision.inputs, decision.wait)
        if len(decision.inputs) > 1:
            journal.record_burst([p.id for p in decision.inputs])
        return decision.inputs


class Merge(DrainHook):
    """Runs the turn again with the double texts that arrived while the model answered (see the module)."""

    def __init__(self, store: DrainStore, policy: BurstPolicy) -> None:
        self.store, self.policy = store, policy

    def again(self, run: DrainRun, inputs: tuple[Pending, ...], result: TurnResult, merges: int,
              journal: StoreJournal) -> tuple[Pending, ...] | None:
        policy = self.policy
        if merges >= policy.max_merges or result.tool_calls or burst.answers_event(inputs):
            return None  # an answered event is a turn of its own: messages after it are answered next
        newer = self.store.peek(run.cid, len(inputs), policy.max_messages - len(inputs))
        grown = burst.extend(inputs, burst.decode_after(newer, run.cid), policy)
        if len(grown) == len(inputs):
            return None
        if self.store.paused(run.cid) is not None:
            # A person took over while the model answered: that answer goes out (its call had started, as the pause
            # hook says), and the new messages are withheld next, not answered by a second call behind their back.
            return None
        metrics.DOUBLE_TEXT_MERGES.inc()
        metrics.DISCARDED_MODEL_CALLS.inc(result.model_calls)
        if result.usage is not None:
            metrics.DISCARDED_TOKENS.inc(result.usage.prompt_tokens + result.usage.completion_tokens)
        log.info("double text: answer discarded, turn runs again",
                 extra={"conversation_id": run.cid, "message_id": inputs[0].id, "inputs": len(grown)})
        journal.record_burst([p.id for p in grown])
        return grown
