"""``Retry-After`` as both providers and WhatsApp send it: delta-seconds or an HTTP date (RFC 9110 10.2.3).

The header is a hint from a server we do not control, so anything unreadable is no hint at all rather than an error:
a sender that raised here would leave its message in flight, to be resent later as if a worker had crashed.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import time
from collections.abc import Callable


def parse_retry_after(value: str | None, *, now: Callable[[], float] = time.time) -> float | None:
    """Seconds to wait (never negative), or None when ``value`` is missing or is neither a number nor a date."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        return _seconds_until_date(text, now)
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _seconds_until_date(text: str, now: Callable[[], float]) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # an HTTP date is always GMT; a zone-less one is read as such, not as local time
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - now())
