"""Tools the model may call, and running them so that any failure becomes a result the model can read."""

from __future__ import annotations

import contextvars
import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from worker.conversation.messages import Message, ToolCall
from worker.conversation.model import ToolSpec
from worker.errors import ToolError

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True, slots=True)
class ToolCallContext:
    """Which call a handler is serving: tools that act on a game engine need the conversation, the input and
    the call, e.g. to derive an idempotency key that is the same on every retry of the same call."""

    conversation_id: str
    input_id: str
    call_id: str


# The service sets the turn's ids around ``Chat.run_turn``; :func:`run_tool` adds the call id around each
# handler. Context variables, because a handler is called as ``handler(**arguments)`` and must not see the
# ids of another thread's (or greenlet's) turn.
_TURN: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("parley_tool_turn", default=None)
_CALL: contextvars.ContextVar[ToolCallContext | None] = contextvars.ContextVar("parley_tool_call", default=None)


@contextmanager
def turn_context(conversation_id: str, input_id: str) -> Iterator[None]:
    """Make ``conversation_id`` and ``input_id`` visible to the tool handlers this block runs."""
    token = _TURN.set((conversation_id, input_id))
    try:
        yield
    finally:
        _TURN.reset(token)


def current_call() -> ToolCallContext:
    """The call the running handler serves. Outside a turn (a library caller that set no turn context) the
    conversation and input ids are empty strings; outside a handler it raises :class:`ToolError`."""
    call = _CALL.get()
    if call is None:
        raise ToolError("current_call() is only available inside a tool handler")
    return call


@dataclass(frozen=True)
class Tool:
    """A function the model may call.

    ``parameters`` is a JSON schema of type ``object``. ``handler(**arguments)`` returns the result: a
    ``str`` is passed as it is, anything else is JSON-encoded. A handler that raises, times out
    (``timeout`` seconds, default the chat's) or returns something unserialisable produces an error result
    the model reads; the turn goes on.

    ``idempotent``: whether a call that may already have run (the worker died inside it, before its result was
    recorded) may run again when the turn is retried, with the same call id. ``False``: it is not repeated; the
    model reads an error result saying its outcome is unknown (an HTTP manifest tool's ``idempotent`` key).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Callable[..., Any]
    timeout: float | None = None
    idempotent: bool = True

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ToolError(f"tool name {self.name!r} must be 1-64 of letters, digits, '_' or '-'")
        if not isinstance(self.parameters, dict) or self.parameters.get("type") != "object":
            raise ToolError(f"tool {self.name!r}: parameters must be a JSON schema with type 'object'")
        if not callable(self.handler):
            raise ToolError(f"tool {self.name!r}: handler is not callable")

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)


def check_tools(tools: list[Tool]) -> dict[str, Tool]:
    by_name: dict[str, Tool] = {}
    for t in tools:
        if not isinstance(t, Tool):
            raise ToolError(f"expected Tool, got {type(t).__name__}")
        if t.name in by_name:
            raise ToolError(f"duplicate tool name {t.name!r}")
        by_name[t.name] = t
    return by_name


def _encode_result(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def run_tool(
    tools: dict[str, Tool], call: ToolCall, *, default_timeout: float, max_chars: int
) -> Message:
    """Run one tool call and return its result message (``is_error`` when it failed)."""

    def result(text: str, error: bool = False) -> Message:
        if len(text) > max_chars:
            text = text[:max_chars] + f"\n[truncated: {len(text) - max_chars} more characters]"
        return Message(role="tool", content=text or "(empty result)", tool_call_id=call.id, name=call.name,
                       is_error=error)

    tool = tools.get(call.name)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        return result(f"Error: there is no tool named {call.name!r}. Available tools: {known}.", True)
    try:
        args = call.parsed_arguments()
    except ValueError as exc:
        return result(f"Error: the arguments are not a JSON object ({exc}).", True)

    outcome: dict[str, Any] = {}
    conversation_id, input_id = _TURN.get() or ("", "")
    context = contextvars.copy_context()  # a new thread starts with an empty context otherwise

    def target() -> None:
        _CALL.set(ToolCallContext(conversation_id, input_id, call.id))
        try:
            outcome["value"] = _encode_result(tool.handler(**args))
        except BaseException as exc:  # the model reads the failure; the worker keeps running
            outcome["error"] = exc

    timeout = tool.timeout if tool.timeout is not None else default_timeout
    # A daemon thread, because a Python thread cannot be killed: a hung handler is abandoned, not waited for.
    thread = threading.Thread(target=context.run, args=(target,), name=f"tool-{call.name}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return result(f"Error: tool {call.name} did not finish within {timeout:g} seconds.", True)
    if "error" in outcome:
        failure = outcome["error"]
        return result(f"Error: {type(failure).__name__}: {failure}", True)
    return result(outcome.get("value", ""))
