"""Messages of a conversation, in one provider-neutral shape that keeps each provider's own form.

A message that came back from a provider keeps its wire form in ``raw`` (every field it had: tool
calls, ids, refusals, reasoning or thinking blocks with their signatures, fields nobody knows yet), so
it goes back to that provider unchanged. The neutral fields (``role``, ``content``, ``tool_calls``,
``tool_call_id``) are what the core reasons with: tool pairing, compaction boundaries, token counts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from worker.errors import InvalidMessageError

Role = Literal["user", "assistant", "tool", "system", "event"]
ROLES: frozenset[str] = frozenset({"user", "assistant", "tool", "system", "event"})

# Prefix under which an event is shown to a model: it reads as context, not as something the user typed.
EVENT_PREFIX = "[Context update, not typed by the user] "


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call an assistant message asks for. ``arguments`` is the JSON text the model wrote."""

    id: str
    name: str
    arguments: str = "{}"

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as a dict; raises ``ValueError`` when the model wrote something else."""
        value = json.loads(self.arguments or "{}")
        if not isinstance(value, dict):
            raise ValueError("tool arguments must be a JSON object")
        return value


@dataclass(frozen=True, slots=True)
class Message:
    """One entry of the history.

    - ``user``: what the person typed.
    - ``assistant``: the model's answer, possibly with ``tool_calls``.
    - ``tool``: the result of one tool call (``tool_call_id`` names it; ``is_error`` marks a failure).
    - ``system``: a system message given after the conversation started; kept as context.
    - ``event``: something that happened outside the chat ("User has just visited Harrogate Theatre").

    ``pinned`` entries survive every compaction. ``seq`` is the entry's position in the conversation's
    whole life (assigned by the state, never reused) so compaction results can be spliced onto a newer
    state. ``raw`` is the provider's wire form, sent back verbatim to the same provider.
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    pinned: bool = False
    seq: int = 0
    raw: dict[str, Any] | None = field(default=None, compare=False)

    def with_seq(self, seq: int) -> Message:
        return replace(self, seq=seq)


def user(text: str) -> Message:
    """A validated user message."""
    return validated(Message(role="user", content=text))


def event(text: str, *, pinned: bool = False) -> Message:
    """A validated event message."""
    return validated(Message(role="event", content=text, pinned=pinned))


def validated(message: Message) -> Message:
    """Check what a caller adds: a known role, non-empty content, well-formed tool calls and results.

    Raises :class:`~worker.errors.InvalidMessageError` with a sentence saying what is wrong.
    """
    if message.role not in ROLES:
        raise InvalidMessageError(f"unknown role {message.role!r}; expected one of {sorted(ROLES)}")
    if not isinstance(message.content, str):
        raise InvalidMessageError(f"{message.role} content must be a string, got {type(message.content).__name__}")
    if message.role in ("user", "event", "system") and not message.content.strip():
        raise InvalidMessageError(f"{message.role} message content must not be empty")
    if message.role == "assistant" and not message.content.strip() and not message.tool_calls:
        raise InvalidMessageError("assistant message needs text or tool calls")
    if message.role == "tool" and not message.tool_call_id:
        raise InvalidMessageError("tool result needs the tool_call_id it answers")
    if message.role != "assistant" and message.tool_calls:
        raise InvalidMessageError("only assistant messages carry tool calls")
    ids = [c.id for c in message.tool_calls]
    if any(not i for i in ids) or len(set(ids)) != len(ids):
        raise InvalidMessageError("tool call ids must be present and distinct within a message")
    if any(not c.name for c in message.tool_calls):
        raise InvalidMessageError("tool call needs a name")
    return message


def from_dict(data: dict[str, Any]) -> Message:
    """Build a message from the OpenAI-style dict callers often have (``role``, ``content``, ...)."""
    if not isinstance(data, dict):
        raise InvalidMessageError("message must be a mapping")
    role = data.get("role")
    content = data.get("content", "")
    if content is None:
        content = ""
    if not isinstance(role, str) or role not in ROLES:
        raise InvalidMessageError(f"unknown role {role!r}")
    calls = []
    for raw_call in data.get("tool_calls") or ():
        fn = raw_call.get("function", raw_call) if isinstance(raw_call, dict) else None
        if not isinstance(fn, dict):
            raise InvalidMessageError("malformed tool call")
        args = fn.get("arguments", "{}")
        if not isinstance(args, str):
            args = json.dumps(args)
        calls.append(ToolCall(id=str(raw_call.get("id", "")), name=str(fn.get("name", "")), arguments=args))
    return validated(
        Message(
            role=role,  # type: ignore[arg-type]
            content=content,
            tool_calls=tuple(calls),
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
            pinned=bool(data.get("pinned", False)),
        )
    )
