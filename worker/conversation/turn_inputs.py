"""The checks every text a turn or an event brings passes before anything is applied: non-empty, within the size
limit, encodable as UTF-8 (a lone surrogate is refused here, not as a bare ``UnicodeEncodeError`` later), and a
message's role and shape. A refused input changes nothing: the caller still holds the old state."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from worker.conversation import messages as msgs
from worker.conversation.messages import Message
from worker.conversation.model import Attachment
from worker.errors import InvalidMessageError, InvalidTextError, OversizeInputError


def check_utf8(what: str, text: str | None) -> None:
    """A Python str may hold a lone surrogate ("\\ud800") that UTF-8 cannot encode: refused here, before anything
    is applied, instead of failing as a bare UnicodeEncodeError when the state is encoded or the request sent."""
    if text is None:
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidTextError(f"{what} holds a character UTF-8 cannot encode ({text[exc.start]!r}, a lone "
                               f"surrogate) at position {exc.start}") from None


def check_message_utf8(m: Message) -> None:
    check_utf8(f"a {m.role} message", m.content)
    for call in m.tool_calls:
        check_utf8(f"a {m.role} message's tool call", f"{call.name}{call.arguments}")


def check_text(what: str, text: object, max_chars: int) -> None:
    if not isinstance(text, str) or not text.strip():
        raise InvalidMessageError(f"{what} must be a non-empty string")
    if len(text) > max_chars:
        raise OversizeInputError(f"{what} is {len(text)} characters; the limit is {max_chars}")
    check_utf8(what, text)


def check_after_history(texts: Sequence[str]) -> None:
    """A turn's texts after the history are checked as the system prompt is (they reach the provider beside it)."""
    for text in texts:
        check_utf8("the context after the history", text)


def user_message(user: str | Message, max_chars: int) -> Message:
    """The turn's user message: text, or a :class:`Message` from ``messages.user(text, media=...)`` (a photo,
    whose caption may be empty)."""
    if not isinstance(user, Message):
        check_text("user text", user, max_chars)
        return msgs.user(user)
    if user.role != "user":
        raise InvalidMessageError(f"the turn's user message must have the user role, not {user.role!r}")
    msgs.validated(user)
    if len(user.content) > max_chars:
        raise OversizeInputError(f"user text is {len(user.content)} characters; the limit is {max_chars}")
    check_message_utf8(user)
    return user


def check_attachments(attachments: Mapping[str, Attachment]) -> dict[str, Attachment]:
    for key, value in attachments.items():
        if not isinstance(key, str) or not isinstance(value, Attachment):
            raise InvalidMessageError("attachments map media ids (str) to Attachment values")
    return dict(attachments)


def split_leading_system(messages: Sequence[Message | dict[str, Any]],
                         max_chars: int) -> tuple[list[str], list[Message]]:
    """Leading system messages (this turn's extra preamble) and the rest (stored), all validated."""
    converted = [m if isinstance(m, Message) else msgs.from_dict(m) for m in messages]
    for m in converted:
        msgs.validated(m)
        if len(m.content) > max_chars:
            raise OversizeInputError(f"a {m.role} message is over {max_chars} characters")
        check_message_utf8(m)
    lead: list[str] = []
    i = 0
    while i < len(converted) and converted[i].role == "system":
        lead.append(converted[i].content)
        i += 1
    return lead, converted[i:]
