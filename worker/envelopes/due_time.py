"""When a scheduled input (``at=``) becomes due: an aware :class:`~datetime.datetime` from the client, or an RFC 3339
timestamp with an offset from the HTTP API and the inlet, turned into milliseconds since the epoch.

A naive time is refused (:class:`~worker.errors.InvalidScheduleError` naming ``at``): the game's clock and the
workers' may sit in different zones, and guessing one would fire a nudge hours early or late. So is a time more than
:data:`MAX_AHEAD_S` ahead: a timer a game meant for minutes or days, held for years by a slip of the year or of ms
for seconds, would sit in the conversation's bound of timers unseen.
"""

from __future__ import annotations

import re
import time
from datetime import datetime

from worker.errors import InvalidScheduleError

#: The shape of an RFC 3339 timestamp with an offset (the HTTP API's ``at``; its JSON schema's pattern).
RFC3339 = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
_RFC3339 = re.compile(RFC3339)

#: How far ahead ``at`` may be (a year, leap day included): the client's and the HTTP API's ``at`` and the CLI's
#: ``--at +N`` alike.
MAX_AHEAD_S = 366 * 86400


def parse_rfc3339(value: object) -> datetime:
    """An RFC 3339 timestamp with an offset (``2026-11-25T19:30:00Z``, ``...+01:00``) as an aware datetime."""
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not _RFC3339.match(value):
        raise InvalidScheduleError("at must be an RFC 3339 timestamp with an offset, e.g. 2026-11-25T19:30:00Z")
    try:
        parsed = datetime.fromisoformat(value.upper())
    except ValueError:
        raise InvalidScheduleError(f"at is not an RFC 3339 timestamp: {value[:64]!r}") from None
    return aware(parsed)


def aware(at: object) -> datetime:
    """``at`` when it is a timezone-aware datetime; else the error naming ``at``."""
    if not isinstance(at, datetime):
        raise InvalidScheduleError(f"at must be a datetime, got {type(at).__name__}")
    if at.tzinfo is None or at.utcoffset() is None:
        raise InvalidScheduleError("at must be timezone-aware (a datetime with tzinfo, or a timestamp with an "
                                   "offset such as Z or +01:00); a naive time is ambiguous")
    return at


def due_ms(at: object, *, now_ms: int | None = None) -> int | None:
    """When ``at`` is due, in ms since the epoch, or ``None`` when it is due now (at or before ``now_ms``). More
    than :data:`MAX_AHEAD_S` after ``now_ms`` is refused."""
    try:
        due = int(aware(at).timestamp() * 1000)
    except (OverflowError, OSError, ValueError) as exc:
        if isinstance(exc, InvalidScheduleError):
            raise
        raise InvalidScheduleError(f"at is out of range: {exc}") from None
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if due - now > MAX_AHEAD_S * 1000:
        raise InvalidScheduleError(f"at is more than a year ahead ({aware(at).isoformat()}); the limit is "
                                   f"{MAX_AHEAD_S // 86400} days from now")
    return due if due > now else None
