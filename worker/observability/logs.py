"""Logging: stdlib logging, JSON lines when ``PARLEY_LOG_JSON`` is set.

Fields passed with ``extra=`` (conversation_id, message_id, ...) are part of every JSON line. Message text
is never logged (the conversation's trace in Redis keeps it). With tracing on (docs/operations.md, "Traces"), a
line logged inside a span carries its ``trace_id`` and ``span_id``, so a log search and a trace backend meet; such a
line shows the conversation id as its spans do (a pseudonym unless ``PARLEY_TRACE_PLAIN_IDS``), since whoever reads
the trace backend reads it too.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from worker.observability import tracing
from worker.observability.tracing.pseudonyms import ID_LOG_FIELDS, PSEUDONYMS
from worker.settings import Settings

_STD = set(vars(logging.LogRecord("x", 0, "x", 0, "", None, None))) | {"message", "asctime", "taskName"}


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    """The record's ``extra`` fields and, inside a span, its trace and span ids (the conversation id then shown as
    the span shows it)."""
    out = {k: v for k, v in record.__dict__.items() if k not in _STD and not k.startswith("_")}
    linked = _trace_fields()
    if linked:
        for key in ID_LOG_FIELDS.intersection(out):
            if isinstance(out[key], str):
                out[key] = PSEUDONYMS.show(out[key])
        out.update(linked)
    return out


def _trace_fields() -> dict[str, str]:
    """The current span's trace and span ids (W3C hex, as trace backends show them); none when tracing is off."""
    # Never the set-up's first call: tracing set-up may itself log, under its lock ("00-<trace>-<span>-<flags>").
    parent = tracing.current_if_set_up()
    if parent is None:
        return {}
    _, trace_id, span_id, _ = parent.split("-")
    return {"trace_id": trace_id, "span_id": span_id}


class JsonFormatter(logging.Formatter):
    """One JSON object per line with the record's ``extra`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        out.update(_fields(record))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        extra = _fields(record)
        return f"{base} {json.dumps(extra, default=str)}" if extra else base


def configure_logging(settings: Settings) -> None:
    """Install Parley's formatter on the root logger (idempotent)."""
    root = logging.getLogger()
    if any(getattr(h, "_parley", False) for h in root.handlers):
        return
    handler = logging.StreamHandler()
    handler._parley = True  # type: ignore[attr-defined]
    handler.setFormatter(JsonFormatter() if settings.observability.log_json else
                         TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(settings.observability.log_level.upper())
    # httpx logs every request at INFO: two lines per turn repeating what Parley's own lines and metrics say,
    # JSON-formatted on the hot path. They come back with PARLEY_LOG_LEVEL=DEBUG.
    if root.level > logging.DEBUG:
        for name in ("httpx", "httpcore"):
            logging.getLogger(name).setLevel(logging.WARNING)
