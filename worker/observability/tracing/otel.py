"""The tracing that is on: OpenTelemetry's SDK, exporting over OTLP/HTTP. Imported only when tracing is wanted (see
:mod:`worker.observability.tracing`); everything here may import ``opentelemetry``."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from worker.conversation import observe, tools
from worker.envelopes.trace_context import valid_traceparent
from worker.observability.tracing import Attributes, Kind, Span
from worker.observability.tracing.genai import ModelCalls, ToolCalls
from worker.observability.tracing.pseudonyms import ID_ATTRIBUTES, PSEUDONYMS, shown

_KINDS = {"internal": trace.SpanKind.INTERNAL, "server": trace.SpanKind.SERVER, "client": trace.SpanKind.CLIENT,
          "producer": trace.SpanKind.PRODUCER, "consumer": trace.SpanKind.CONSUMER}
_PROPAGATOR = TraceContextTextMapPropagator()

#: The providers this module made (a test may make several in one process; only the first becomes the global one).
_MADE: set[int] = set()

#: The conversation the model and tool calls of this context belong to (``gen_ai.conversation.id``), as spans show it.
CONVERSATION: ContextVar[str | None] = ContextVar("parley_trace_conversation", default=None)


class _Live(Span):
    """A recording span, as the facade shows it."""

    __slots__ = ("_span",)

    def __init__(self, span: trace.Span) -> None:
        self._span = span

    def set(self, key: str, value: str | int | float | bool | None) -> None:
        if value is not None:
            self._span.set_attribute(key, PSEUDONYMS.show(value) if key in ID_ATTRIBUTES and isinstance(value, str)
                                     else value)


def _resource() -> Resource:
    """The SDK's resource from ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``; the service is "parley" when
    neither names it (the SDK's default would be "unknown_service")."""
    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    return Resource.create({} if named else {"service.name": "parley"})


def context_of(traceparent: str | None) -> Context | None:
    """The OpenTelemetry context a stored ``traceparent`` continues (None for none or an invalid one)."""
    tp = valid_traceparent(traceparent)
    return _PROPAGATOR.extract({"traceparent": tp}) if tp else None


class Tracing:
    """Spans of this process: a tracer provider with a batching OTLP/HTTP exporter, configured by ``OTEL_*``."""

    def __init__(self, provider: TracerProvider, *, owned: bool = True) -> None:
        self.provider, self.owned = provider, owned
        self.tracer = provider.get_tracer("parley")
        # The core's model and tool calls report here (it imports nothing of tracing, see observe and tools).
        observe.trace_model_calls(ModelCalls(self.tracer, CONVERSATION))
        tools.trace_tool_calls(ToolCalls(self.tracer, CONVERSATION))

    @classmethod
    def from_env(cls) -> Tracing:
        given = trace.get_tracer_provider()
        if isinstance(given, TracerProvider) and id(given) not in _MADE:
            # The application set up OpenTelemetry itself (a producer's service using the client): its provider,
            # exporter and sampler it is, rather than a second export of the same spans.
            return cls(given, owned=False)
        provider = TracerProvider(resource=_resource())  # the sampler from OTEL_TRACES_SAMPLER(_ARG)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # endpoint, headers: OTEL_EXPORTER_*
        _MADE.add(id(provider))
        trace.set_tracer_provider(provider)  # so a deployment's tools can add spans of their own
        return cls(provider)

    @contextmanager
    def span(self, name: str, *, parent: str | None, links: Sequence[str | None], kind: Kind,
             attributes: Attributes | None) -> Iterator[Span]:
        linked = [trace.Link(trace.get_current_span(c).get_span_context())
                  for c in (context_of(tp) for tp in links) if c is not None]
        with self.tracer.start_as_current_span(name, context=context_of(parent), kind=_KINDS[kind],
                                               attributes=shown(attributes), links=linked) as s:
            yield _Live(s)

    def record(self, name: str, start: float, end: float, *, parent: str | None,
               attributes: Attributes | None) -> None:
        s = self.tracer.start_span(name, context=context_of(parent), attributes=shown(attributes),
                                   start_time=int(start * 1e9))
        s.end(end_time=int(max(start, end) * 1e9))

    @staticmethod
    def current() -> str | None:
        carrier: dict[str, Any] = {}
        _PROPAGATOR.inject(carrier)
        return valid_traceparent(carrier.get("traceparent"))

    @contextmanager
    def conversation(self, cid: str) -> Iterator[None]:
        token = CONVERSATION.set(PSEUDONYMS.show(cid))
        try:
            yield
        finally:
            CONVERSATION.reset(token)

    def flush(self, timeout_seconds: float) -> None:
        self.provider.force_flush(int(timeout_seconds * 1000))

    def shutdown(self) -> None:
        observe.trace_model_calls(None)
        tools.trace_tool_calls(None)
        if self.owned:
            self.provider.shutdown()

