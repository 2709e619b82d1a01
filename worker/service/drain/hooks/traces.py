"""Traces of the drain (:mod:`worker.tracing`): each input's ``drain`` span continues the trace its envelope carries
(a retried or taken-over attempt is a new span in the same trace), after a ``queue`` span for the time it waited;
the ``turn`` span holds the model and tool calls and links the traces of every input a burst's turn answers. In the
hook list only when traces are on."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from worker import tracing
from worker.service.burst import Pending
from worker.service.drain.hooks.base import DrainHook
from worker.service.drain.run import DrainRun
from worker.store.results import Snapshot
from worker.tracing.context import stored_trace


class TurnSpans(DrainHook):
    """The ``turn`` span around the model's answer: a child of the head input's drain span, linked to the trace of
    each input it answers (one link per message of a burst)."""

    def model_call(self, run: DrainRun, inputs: tuple[Pending, ...]) -> AbstractContextManager[object]:
        return self._turn(run, inputs)

    @contextmanager
    def _turn(self, run: DrainRun, inputs: tuple[Pending, ...]) -> Iterator[None]:
        with tracing.span("turn", links=[p.env.traceparent for p in inputs], attributes={
                "gen_ai.conversation.id": run.cid, "parley.input.id": inputs[0].id,
                "parley.turn.inputs": len(inputs)}), tracing.conversation(run.cid):
            yield


def input_span(cid: str, snap: Snapshot, attempts: int) -> AbstractContextManager[tracing.Span]:
    """The span of one attempt at the head input of ``snap``: deciding it and applying the outcome (the commit)."""
    if not tracing.enabled():
        return tracing.span("drain")  # the shared no-op
    traceparent, accepted_at = stored_trace(snap.input)
    if attempts <= 1 and accepted_at is not None:  # the wait in the mailbox, once: a retry's wait is the retry's
        tracing.record("queue", accepted_at, time.time(), parent=traceparent,
                       attributes={"gen_ai.conversation.id": cid, "parley.input.id": snap.input_id or ""})
    return tracing.span("drain", parent=traceparent, kind="consumer", attributes={
        "gen_ai.conversation.id": cid, "parley.input.id": snap.input_id or "", "parley.attempt": attempts})
