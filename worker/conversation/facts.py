"""Keyed facts: what the game keeps current in a conversation ("The player's target is Harrogate Theatre").

A fact is set by the game only (invariant 12): an event sent with ``key`` (:meth:`~worker.conversation.chat.Chat.
apply_event`), or a game tool's answer (a Python tool's return value or an HTTP tool's JSON answer) holding a
``"facts"`` object. A player's words never become one. The state keeps one fact per key, the latest; facts live
outside the history (:attr:`~worker.conversation.state.ConversationState.facts`), so no compaction drops or
rewrites them. By default those as of the last compaction are rendered in the preamble and those changed since after
the history, last in the prompt, marked as replacing the preamble's (``Chat.facts_placement``: all after the history,
or all in the preamble, are the other layouts; :mod:`worker.conversation.prompt` says why). ``Chat.max_pinned`` caps pinned items and facts together, the oldest pinned items going first
(:mod:`worker.conversation.bounded`).

A game tool's answer may carry keys Parley acts on beside the result the model reads: :data:`RESULT_KEYS` names
them, and :func:`split_result` takes them out (the rest is the result). ``"facts"`` is the first, ``"reply_parts"``
(parts added to the turn's reply, :mod:`worker.envelopes.reply_parts`) the second; another key slots in by adding an entry
there and a field to :class:`ResultExtras`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from worker.envelopes.reply_parts import parse_parts, part_json
from worker.errors import InvalidMessageError

log = logging.getLogger("parley.tools")

MAX_KEY_CHARS = 128
MAX_FACTS_PER_RESULT = 20


def check_key(key: object) -> str:
    """``key`` as a fact's key, or :class:`~worker.errors.InvalidMessageError` saying what is wrong with it."""
    if not isinstance(key, str) or not key.strip():
        raise InvalidMessageError("a fact's key must be a non-empty string")
    if len(key) > MAX_KEY_CHARS or any(c in key for c in "\n\r\x00"):
        raise InvalidMessageError(f"a fact's key is at most {MAX_KEY_CHARS} characters, without newlines or NUL")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidMessageError("a fact's key holds a character UTF-8 cannot encode") from None
    return key


def _facts(value: object, max_chars: int) -> tuple[tuple[str, str], ...]:
    """A tool's ``"facts"``: an object of key -> non-empty text. Raises ``ValueError`` saying what is wrong."""
    if not isinstance(value, Mapping):
        raise ValueError("'facts' must be an object of key -> text")
    if len(value) > MAX_FACTS_PER_RESULT:
        raise ValueError(f"'facts' holds {len(value)} keys; at most {MAX_FACTS_PER_RESULT}")
    out = []
    for key, text in value.items():
        try:
            check_key(key)
        except InvalidMessageError as exc:
            raise ValueError(str(exc)) from None
        if not isinstance(text, str) or not text.strip() or len(text) > max_chars:
            raise ValueError(f"fact {key!r} must be a non-empty text of at most {max_chars} characters")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"fact {key!r} holds a character UTF-8 cannot encode") from None
        out.append((key, text))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class ResultExtras:
    """What a game tool's answer carried for Parley besides its result (empty: nothing)."""

    facts: tuple[tuple[str, str], ...] = ()
    reply_parts: tuple[dict[str, Any], ...] = ()


#: The most parts one tool call may add to a reply (each goes out as a message of its own).
MAX_PARTS_PER_RESULT = 10


def _reply_parts(value: object, max_chars: int) -> tuple[dict[str, Any], ...]:
    """A tool's ``"reply_parts"``: a list of parts, each checked as any reply part is, their JSON form kept. The parts
    and their bounds travel with the reply (:mod:`worker.envelopes.reply_parts`); the core adds only how many one call
    may add. Raises ``ValueError`` (an :class:`~worker.errors.InvalidReplyPartError` is one) saying what is wrong."""
    if isinstance(value, list) and len(value) > MAX_PARTS_PER_RESULT:
        raise ValueError(f"'reply_parts' holds {len(value)} parts; at most {MAX_PARTS_PER_RESULT}")
    return tuple(part_json(p) for p in parse_parts(value, "reply_parts"))  # type: ignore[arg-type]


#: The keys of a game tool's answer that Parley takes out, each with its reader (value, limit) -> field value.
RESULT_KEYS: dict[str, Callable[[Any, int], Any]] = {"facts": _facts, "reply_parts": _reply_parts}


def split_result(value: Any, max_chars: int) -> tuple[Any, ResultExtras]:
    """A game tool's return value without the :data:`RESULT_KEYS` (the result the model reads) and what they held.
    Anything but a JSON object is returned as it is. A key that is malformed is dropped and logged (the tool's
    result still reaches the model: the tool may have acted on the game, and an error result would invite a retry)."""
    if not isinstance(value, dict) or not any(k in value for k in RESULT_KEYS):
        return value, ResultExtras()
    rest = {k: v for k, v in value.items() if k not in RESULT_KEYS}
    found: dict[str, Any] = {}
    for key, read in RESULT_KEYS.items():
        if key in value:
            try:
                found[key] = read(value[key], max_chars)
            except ValueError as exc:
                log.warning("a tool's answer held a malformed %r; ignored", key, extra={"error": str(exc)})
    return rest, ResultExtras(**found)
