"""The trace context as Parley stores it: a W3C ``traceparent`` string (``00-<trace id>-<span id>-<flags>``).

It rides in the envelope a producer's accept writes to the mailbox and in the reply record the commit writes to the
outbox, so a trace survives the queue, retries and a takeover by another worker. Pure and free of OpenTelemetry: it
is read whether or not tracing is on, and a stored entry without one (written before tracing, or with it off) is
simply an input without a trace.
"""

from __future__ import annotations

import re
from typing import Any

import msgpack

#: https://www.w3.org/TR/trace-context/#traceparent-header (version 00; later versions start the same way).
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16

#: What the stored field may hold at most (a traceparent is 55 characters; room for a later version's additions).
MAX_TRACEPARENT_CHARS = 128


def valid_traceparent(value: object) -> str | None:
    """``value`` when it is a usable ``traceparent`` (version ``ff`` and all-zero ids are not), else None: a bad
    one is dropped, never an error (the input goes on, in a trace of its own)."""
    if not isinstance(value, str) or len(value) > MAX_TRACEPARENT_CHARS:
        return None
    m = _TRACEPARENT.match(value)
    if m is None or m.group(1) == "ff" or m.group(2) == _ZERO_TRACE or m.group(3) == _ZERO_SPAN:
        return None
    if m.group(1) == "00" and m.group(5):
        return None  # version 00 has exactly four fields
    return value


def trace_id(traceparent: str | None) -> str | None:
    """The 32 hex digits of the trace a valid ``traceparent`` names."""
    tp = valid_traceparent(traceparent)
    return tp[3:35] if tp else None


def stored_trace(raw_envelope: bytes | None) -> tuple[str | None, float | None]:
    """The trace context stored in an envelope's bytes and when the input was accepted, without validating the rest
    of it (the drain reads them before it decides on the input; a malformed envelope is dead-lettered in a trace of
    its own)."""
    if not raw_envelope:
        return None, None
    try:
        obj: Any = msgpack.unpackb(raw_envelope, raw=False, strict_map_key=True, max_map_len=64)
    except Exception:  # whatever the decision makes of it, a bad envelope has no trace
        return None, None
    if not isinstance(obj, dict):
        return None, None
    at = obj.get("accepted_at")
    return valid_traceparent(obj.get("traceparent")), float(at) if isinstance(at, int | float) else None
