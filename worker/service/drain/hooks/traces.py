"""Traces of the drain (:mod:`worker.observability.tracing`): each input's ``drain`` span continues the trace its envelope carries
(a retried or taken-over attempt is a new span in the same trace), with a ``queue`` span for the time it waited;
the ``turn`` span holds the model and tool calls and links the traces of every input a burst's turn answers. In the
hook list only when traces are on."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from types import TracebackType

from worker.envelopes.trace_context import stored_trace
from worker.observability import tracing
from worker.service.drain.burst import Pending
from worker.service.drain.hooks.base import DrainHook
from worker.service.drain.run import DrainRun
from worker.store.answers import Snapshot


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


class InputSpan:
    """The span of one attempt at the head input of a drain (deciding it and applying the outcome: the commit), and,
    once an attempt applied the input (``applied`` set by the drainer), the ``queue`` span: from the accept to the
    start of that attempt. An attempt put off (a burst still being typed), retried later or killed has no ``queue``
    span, so an input has one."""

    def __init__(self, cid: str, snap: Snapshot, attempts: int) -> None:
        self.traceparent, self.accepted_at = stored_trace(snap.input)
        self.attributes = {"gen_ai.conversation.id": cid, "parley.input.id": snap.input_id or ""}
        self.applied = False
        self._taken = 0.0
        self._span = tracing.span("drain", parent=self.traceparent, kind="consumer",
                                  attributes={**self.attributes, "parley.attempt": attempts})

    def __enter__(self) -> InputSpan:
        self._taken = time.time()
        self._span.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._span.__exit__(kind, exc, tb)
        if self.applied and self.accepted_at is not None:
            tracing.record("queue", self.accepted_at, self._taken, parent=self.traceparent, attributes=self.attributes)


class _Untraced:
    """What :func:`input_span` is when traces are off: one shared object that does nothing."""

    applied = False

    def __enter__(self) -> _Untraced:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_UNTRACED = _Untraced()


def input_span(cid: str, snap: Snapshot, attempts: int) -> InputSpan | _Untraced:
    """The span of one attempt at the head input of ``snap`` (:class:`InputSpan`; a shared no-op when traces are
    off). The drainer sets ``applied`` when the attempt committed the input."""
    if not tracing.enabled():
        return _UNTRACED
    return InputSpan(cid, snap, attempts)
