"""A log line written inside a span carries its trace and span ids (JSON and text formats); none when tracing is
off, so a log search and the trace backend meet on the same ids."""

from __future__ import annotations

import io
import json
import logging
import threading

import pytest

from tests.support.otlp_receiver import OtlpReceiver
from worker.observability import tracing
from worker.observability.logs import JsonFormatter, TextFormatter
from worker.observability.tracing.pseudonyms import PSEUDONYMS
from worker.testing import reset_tracing


def _record() -> logging.LogRecord:
    record = logging.LogRecord("parley.service", logging.INFO, __file__, 1, "turn done", None, None)
    record.conversation_id = "447700900123"
    return record


def test_a_line_inside_a_span_names_its_trace(traced: OtlpReceiver) -> None:
    with tracing.span("drain"):
        parent = tracing.current()
        line = json.loads(JsonFormatter().format(_record()))
        text = TextFormatter("%(message)s").format(_record())
    assert parent is not None
    _, trace_id, span_id, _ = parent.split("-")
    # The conversation id as the spans show it (a pseudonym of the player's number), on a line a trace links to.
    assert (line["trace_id"], line["span_id"], line["conversation_id"]) == (
        trace_id, span_id, PSEUDONYMS.show("447700900123"))
    assert "447700900123" not in json.dumps(line) + text
    assert f'"trace_id": "{trace_id}"' in text
    tracing.flush()
    assert traced.wait_for(lambda: any(s.trace_id == trace_id for s in traced.named("drain")))


def test_off_a_line_has_no_trace_fields() -> None:
    reset_tracing()
    assert not tracing.enabled()
    line = json.loads(JsonFormatter().format(_record()))
    assert "trace_id" not in line and "span_id" not in line


def test_a_line_logged_while_tracing_sets_up_does_not_wait_for_it(traced: OtlpReceiver,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The set-up (or a library it calls) may log: the formatter must not start a second set-up under the first's
    lock (it did: a worker's first log line inside the set-up hung the process)."""
    from worker.observability.tracing import otel

    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("parley.test.setup")
    logger.addHandler(handler)
    real = otel.Tracing.from_env

    def logging_set_up() -> otel.Tracing:
        logger.warning("setting up")
        return real()

    monkeypatch.setattr(otel.Tracing, "from_env", staticmethod(logging_set_up))
    reset_tracing()
    done = threading.Event()
    threading.Thread(target=lambda: (tracing.enabled(), done.set()), daemon=True).start()
    try:
        assert done.wait(10), "the set-up's own log line waited for the set-up"
    finally:
        logger.removeHandler(handler)
    assert tracing.enabled()
