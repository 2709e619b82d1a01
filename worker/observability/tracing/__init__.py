"""Traces: one per input, from the webhook's POST (or the producer's call) to the reply's status webhook.

OpenTelemetry's SDK (the optional extra ``otel``) is loaded only when tracing is on: ``OTEL_EXPORTER_OTLP_ENDPOINT``
or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` set, and ``OTEL_SDK_DISABLED`` not ``true``. The standard ``OTEL_*``
variables configure it (service name, headers, sampler, batching); spans go out over OTLP/HTTP (protobuf). When it
is off, this module is a facade that does nothing: :func:`span` hands back one shared no-op context, :func:`current`
is None, and nothing of OpenTelemetry is imported.

The context travels as a W3C ``traceparent`` (:mod:`worker.envelopes.trace_context`) in the envelope and in the outbox's
reply record, so the drain, a retry and a takeover after a SIGKILL continue the input's trace (a retried attempt is
a new span in the same trace). Spans and attributes follow the OpenTelemetry GenAI semantic conventions; message
content is recorded only when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` (player text is personal
data).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from worker.observability.tracing.otel import Tracing

log = logging.getLogger("parley.tracing")

Kind = Literal["internal", "server", "client", "producer", "consumer"]
Attributes = Mapping[str, str | int | float | bool]

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


class Span:
    """What a block sees of its span: attributes to add as they become known. The no-op one when tracing is off."""

    __slots__ = ()

    def set(self, key: str, value: str | int | float | bool | None) -> None:
        """Set attribute ``key`` (None: leave it unset)."""


_NOOP_SPAN = Span()


class _Noop(AbstractContextManager[Span]):
    """The context :func:`span` hands back when tracing is off: one shared instance, nothing done."""

    def __enter__(self) -> Span:
        return _NOOP_SPAN

    def __exit__(self, *exc: object) -> None:
        return None


_NOOP = _Noop()
_lock = threading.Lock()
_tracing: Tracing | None = None
_decided = False


def wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for traces: an OTLP endpoint set, and the SDK not disabled."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def _get() -> Tracing | None:
    """The SDK's tracing, set up on first use in this process (a prefork child sets up its own), or None."""
    global _tracing, _decided
    if _decided:
        return _tracing
    with _lock:
        if not _decided:
            if wanted():
                try:
                    from worker.observability.tracing.otel import Tracing
                except ImportError as exc:
                    log.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set but the 'otel' extra is not installed "
                                "(pip install 'parley[otel]'): no traces (%s)", exc)
                else:
                    _tracing = Tracing.from_env()
            _decided = True
    return _tracing


def enabled() -> bool:
    """Whether spans are recorded in this process."""
    return (_tracing if _decided else _get()) is not None


def span(name: str, *, parent: str | None = None, links: Sequence[str | None] = (), kind: Kind = "internal",
         attributes: Attributes | None = None) -> AbstractContextManager[Span]:
    """A span around the block, the current one inside it. ``parent``: a stored ``traceparent`` to continue (None:
    the current span, or a new trace); ``links``: the traces of other inputs it also serves (a burst's turn). An
    exception leaving the block is recorded on the span, which is marked as an error."""
    t = _tracing if _decided else _get()  # decided: no call (this runs several times a turn)
    if t is None:
        return _NOOP
    return t.span(name, parent=parent, links=links, kind=kind, attributes=attributes)


def record(name: str, start: float, end: float, *, parent: str | None = None,
           attributes: Attributes | None = None) -> None:
    """A span that already happened, from ``start`` to ``end`` (``time.time()`` seconds): the time an input waited
    in its mailbox, known only when a worker takes it."""
    t = _get()
    if t is not None:
        t.record(name, start, end, parent=parent, attributes=attributes)


def current() -> str | None:
    """The current span's ``traceparent``, to store with what continues the trace elsewhere; None when off."""
    t = _tracing if _decided else _get()
    return None if t is None else t.current()


def current_if_set_up() -> str | None:
    """As :func:`current`, but never sets tracing up: for the log formatter, which the set-up itself (or a library
    it calls) may log through, with the set-up's lock held."""
    t = _tracing if _decided else None
    return None if t is None else t.current()


def capture_content() -> bool:
    """Whether message content goes on the spans (the GenAI conventions' opt-in; off by default)."""
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() == "true"


def flush(timeout_seconds: float = 5.0) -> None:
    """Export the spans ended so far now (a worker shutting down; tests)."""
    t = _get()
    if t is not None:
        t.flush(timeout_seconds)


@contextmanager
def conversation(cid: str) -> Iterator[None]:
    """Name the conversation the model and tool calls in the block belong to (``gen_ai.conversation.id``)."""
    t = _get()
    if t is None:
        yield
        return
    with t.conversation(cid):
        yield

