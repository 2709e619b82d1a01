"""What an operator who takes a conversation over may send (``pause``'s ``seconds``, an operator message's
``parts``), checked before anything is stored: a bad value is an :class:`~worker.errors.InputError` naming the
field, and nothing is paused or queued."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from worker.errors import InputError, InvalidMessageError, OversizeInputError
from worker.store.pauses import MAX_PAUSE_SECONDS

#: The reply parts an operator's message may carry today; the rich ones (image, location, buttons, ...) come with
#: rich replies (issue 31).
PART_TYPES = ("text",)
#: The most parts one operator's message may carry (each is one WhatsApp message; more are more messages).
MAX_PARTS = 10


def _bad(err: InputError, field: str) -> InputError:
    err.field = field
    return err


def pause_seconds(seconds: object) -> float | None:
    """``seconds`` as a pause's length: None (until resumed) or a number of seconds above 0, at most a week."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
        raise _bad(InvalidMessageError(f"seconds must be a number of seconds, got {seconds!r}"), "seconds")
    if not 0 < seconds <= MAX_PAUSE_SECONDS:
        raise _bad(InvalidMessageError(f"seconds must be above 0 and at most {MAX_PAUSE_SECONDS} (a week), got "
                                       f"{seconds}; leave it out to pause until resumed"), "seconds")
    return float(seconds)


def text_parts(parts: Sequence[Any] | None, max_chars: int) -> list[str] | None:
    """The texts of ``parts`` (``[{"type": "text", "text": ...}, ...]``), sent after the message's text, each as its
    own message. Any other type is refused: rich parts are not supported yet."""
    if parts is None:
        return None
    if isinstance(parts, str | bytes) or not isinstance(parts, Sequence):
        raise _bad(InvalidMessageError("parts must be a list of {\"type\": \"text\", \"text\": ...}"), "parts")
    if len(parts) > MAX_PARTS:
        raise _bad(InvalidMessageError(f"parts holds {len(parts)} parts; the limit is {MAX_PARTS}"), "parts")
    out = []
    for i, part in enumerate(parts):
        where = f"parts.{i}"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in PART_TYPES:
            raise _bad(InvalidMessageError(
                f"{where}.type: {kind!r} is not supported yet: an operator's message carries text parts only "
                "({\"type\": \"text\", \"text\": ...}); rich parts (image, location, buttons, ...) are not "
                "supported yet"), f"{where}.type")
        extra = sorted(set(part) - {"type", "text"})
        if extra:
            raise _bad(InvalidMessageError(f"{where}: unknown field {extra[0]!r} in a text part"), f"{where}.{extra[0]}")
        text = part.get("text")
        if not isinstance(text, str) or not text.strip():
            raise _bad(InvalidMessageError(f"{where}.text: a text part needs non-empty text"), f"{where}.text")
        if len(text) > max_chars:
            raise _bad(OversizeInputError(f"{where}.text is {len(text)} characters; the limit is {max_chars}"),
                       f"{where}.text")
        out.append(text)
    return out
