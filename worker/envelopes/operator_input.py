"""What an operator who takes a conversation over may send (``pause``'s ``seconds``, an operator message's
``parts``), checked before anything is stored: a bad value is an :class:`~worker.errors.InputError` naming the
field, and nothing is paused or queued."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from worker.envelopes.reply_parts import OutPart, TextPart, parse_part
from worker.errors import InputError, InvalidMessageError, OversizeInputError

#: The longest timed pause: a week (longer ones are an untimed pause and a resume).
MAX_PAUSE_SECONDS = 7 * 86_400
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


def operator_parts(parts: Sequence[Any] | None, max_chars: int) -> list[OutPart] | None:
    """The parts of an operator's message (``[{"type": "text", "text": ...}, {"type": "location", ...}, ...]``), sent
    after the message's text, each as its own message: texts as strings, every other kind checked against WhatsApp's
    limits (:mod:`worker.envelopes.reply_parts`)."""
    if parts is None:
        return None
    if isinstance(parts, str | bytes) or not isinstance(parts, Sequence):
        raise _bad(InvalidMessageError("parts must be a list of parts ({\"type\": \"text\", \"text\": ...}, "
                                       "{\"type\": \"location\", ...}, ...)"), "parts")
    if len(parts) > MAX_PARTS:
        raise _bad(InvalidMessageError(f"parts holds {len(parts)} parts; the limit is {MAX_PARTS}"), "parts")
    out: list[OutPart] = []
    for i, value in enumerate(parts):
        part = parse_part(value, f"parts.{i}")
        if isinstance(part, TextPart):
            if len(part.text) > max_chars:
                raise _bad(OversizeInputError(f"parts.{i}.text is {len(part.text)} characters; the limit is "
                                              f"{max_chars}"), f"parts.{i}.text")
            out.append(part.text)
        else:
            out.append(part)
    return out
