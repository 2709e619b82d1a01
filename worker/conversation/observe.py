"""Reporting model round trips to an observer (for metrics) without the core doing I/O itself.

The chat loop reports its own calls to ``Chat.observer``. A compactor's calls (the summariser's) happen
inside :meth:`Compactor.compact`, whose signature users implement and which has no observer argument, so
:class:`~worker.conversation.chat.Chat` makes its observer current for the duration of a compaction
(:func:`observing`) and compactors call their model through :func:`complete_observed`, which reports to
the current one. A context variable keeps this right per thread and per greenlet.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from worker.conversation.model import FinishReason, Model, ModelRequest, ModelResponse, Usage

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RoundTrip:
    """One model call, as the observer sees it (for metrics)."""

    purpose: str
    usage: Usage | None
    finish_reason: FinishReason
    seconds: float
    model: str


Observer = Callable[[RoundTrip], None]

_current: ContextVar[Observer | None] = ContextVar("parley_observer", default=None)

ModelCallTracer = Callable[[Model, ModelRequest], AbstractContextManager[Callable[[ModelResponse], None]]]
"""A context around one model call (a span), given the model and the request; what it yields is called with the
response. Set by :mod:`worker.observability.tracing` when traces are on, so the core reports its calls without importing it."""

_tracer: ModelCallTracer | None = None


def trace_model_calls(tracer: ModelCallTracer | None) -> None:
    """Run every model call of this process inside ``tracer`` (None: none, the default)."""
    global _tracer
    _tracer = tracer


@contextmanager
def observing(observer: Observer | None) -> Iterator[None]:
    """Make ``observer`` the one :func:`complete_observed` reports to while the block runs."""
    token = _current.set(observer)
    try:
        yield
    finally:
        _current.reset(token)


class UsageTally:
    """An observer that adds up the usage of the round trips it sees (what a compaction's model calls cost) and
    passes each one on to ``then``."""

    def __init__(self, then: Observer | None = None) -> None:
        self.then = then
        self.prompt = self.completion = self.cached = self.cache_write = 0
        self.model: str | None = None

    def __call__(self, trip: RoundTrip) -> None:
        if trip.usage is not None:
            self.prompt += trip.usage.prompt_tokens
            self.completion += trip.usage.completion_tokens
            self.cached += trip.usage.cached_tokens
            self.cache_write += trip.usage.cache_creation_tokens
        self.model = trip.model or self.model
        if self.then is not None:
            self.then(trip)

    def usage(self) -> Usage | None:
        """The sum, or ``None`` when no round trip reported any tokens."""
        if not (self.prompt or self.completion):
            return None
        return Usage(self.prompt, self.completion, self.cached, self.cache_write)


def complete_observed(model: Model, request: ModelRequest, observer: Observer | None = None) -> ModelResponse:
    """Call ``model`` and report the round trip to ``observer``, or else to the current one (if any).

    An observer that fails is logged and ignored: metrics must never break a turn or a compaction.
    """
    started = time.perf_counter()
    tracer = _tracer
    if tracer is None:
        response = model.complete(request)
    else:
        with tracer(model, request) as answered:
            response = model.complete(request)
            answered(response)
    target = observer if observer is not None else _current.get()
    if target is not None:
        trip = RoundTrip(request.purpose, response.usage, response.finish_reason,
                         time.perf_counter() - started, model.model_name)
        try:
            target(trip)
        except Exception:  # an observer is user code (metrics); whatever it raises must not cost the turn
            log.exception("observer failed")
    return response
