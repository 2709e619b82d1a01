"""Tools the model may call, and running them so that any failure becomes a result the model can read."""

from __future__ import annotations

import contextvars
import functools
import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match

from worker.conversation.facts import ResultExtras, split_result
from worker.conversation.messages import Message, ToolCall
from worker.conversation.model import ToolSpec
from worker.errors import ToolError

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_NO_EXTRAS = ResultExtras()


def without_lone_surrogates(value: Any) -> Any:
    """``value`` (a str, or lists, tuples and dicts of them) with every lone surrogate, which UTF-8 cannot encode,
    replaced by U+FFFD; the same object when there is none. For text Parley did not take from its caller: a tool's
    result, a model's reply (JSON may escape half a surrogate pair); the turn goes on instead of failing when the
    state is encoded."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value) if _LONE_SURROGATE.search(value) else value
    if isinstance(value, list | tuple):
        items = [without_lone_surrogates(v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else type(value)(items)
    if isinstance(value, dict):
        pairs = [(without_lone_surrogates(k), without_lone_surrogates(v)) for k, v in value.items()]
        same = all(a is k and b is v for (a, b), (k, v) in zip(pairs, value.items(), strict=True))
        return value if same else dict(pairs)
    return value


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


ToolCallTracer = Callable[[ToolCall], AbstractContextManager[Callable[[str], None]]]
"""A context around one tool handler's run (a span), given the call; what it yields is called with the result's text.
Set by :mod:`worker.observability.tracing` when traces are on, so the core reports its calls without importing it."""

_tracer: ToolCallTracer | None = None


def trace_tool_calls(tracer: ToolCallTracer | None) -> None:
    """Run every tool handler of this process inside ``tracer`` (None: none, the default)."""
    global _tracer
    _tracer = tracer


def _untraced(text: str) -> None:
    """What an untraced call does with its result."""


_UNTRACED: AbstractContextManager[Callable[[str], None]] = nullcontext(_untraced)


@contextmanager
def turn_context(conversation_id: str, input_id: str) -> Iterator[None]:
    """Make ``conversation_id`` and ``input_id`` visible to the tool handlers this block runs."""
    token = _TURN.set((conversation_id, input_id))
    try:
        yield
    finally:
        _TURN.reset(token)


@functools.lru_cache(maxsize=512)
def _validator_for(schema_json: str) -> Any:
    """The checked validator of one schema (by its canonical JSON): an MCP server's tools are built again on every
    turn, and checking a schema costs more than a call's validation. ``$schema`` picks the draft (default 2020-12,
    what OpenAI and Anthropic read); no reference is ever fetched (jsonschema resolves none it is not given)."""
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    # Formats are checked too ("email", "ipv4", ... and those whose optional checkers are installed): a game that
    # writes one in its schema means it.
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def schema_validator(name: str, schema: dict[str, Any]) -> Any:
    """A validator for a tool's ``parameters``, or :class:`ToolError` saying what is wrong with the schema."""
    try:
        return _validator_for(json.dumps(schema, sort_keys=True, default=str))
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        raise ToolError(f"tool {name!r}: parameters is not a valid JSON schema at {where}: {exc.message}") from None


def argument_problems(validator: Any, arguments: dict[str, Any], limit: int = 5) -> list[str]:
    """What is wrong with a call's ``arguments``, one sentence per problem naming the argument (the most relevant
    first, at most ``limit``); empty when they are valid."""
    errors = list(validator.iter_errors(arguments))
    if not errors:
        return []
    first = best_match(errors)
    ordered = [first, *(e for e in errors if e is not first)][:limit]
    return [(f"argument {'.'.join(str(p) for p in e.absolute_path)!r}: " if e.absolute_path else "") + e.message
            for e in ordered]


def turn_conversation_id() -> str:
    """The conversation of the running turn (:func:`turn_context`); an empty string outside one (a library caller
    that set none)."""
    turn = _TURN.get()
    return "" if turn is None else turn[0]


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

    ``parameters`` is a JSON schema of type ``object``, checked when the tool is made (an invalid one raises
    :class:`ToolError` then, never at call time). ``handler(**arguments)`` returns the result: a ``str`` is passed
    as it is, anything else is JSON-encoded. Arguments that do not match ``parameters`` are an error result saying
    which argument is wrong, and the handler is not called. A handler that raises, times out (``timeout``
    seconds, default the chat's) or returns something unserialisable produces an error result the model reads;
    the turn goes on.

    ``game``: a game tool (a Python tool or an HTTP manifest tool; an MCP server's are not): its answer may set
    facts (a ``"facts"`` object, see :mod:`worker.conversation.facts`).

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
    game: bool = True

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ToolError(f"tool name {self.name!r} must be 1-64 of letters, digits, '_' or '-'")
        if not isinstance(self.parameters, dict) or self.parameters.get("type") != "object":
            raise ToolError(f"tool {self.name!r}: parameters must be a JSON schema with type 'object'")
        if not callable(self.handler):
            raise ToolError(f"tool {self.name!r}: handler is not callable")
        # Not a field: equality and the repr stay those of the tool's definition.
        object.__setattr__(self, "_validator", schema_validator(self.name, self.parameters))

    def argument_problems(self, arguments: dict[str, Any]) -> list[str]:
        """What is wrong with ``arguments`` for this tool's schema (empty when they are valid)."""
        return argument_problems(self._validator, arguments)  # type: ignore[attr-defined]

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

    def result(text: str, error: bool = False, extras: ResultExtras = _NO_EXTRAS) -> Message:
        text = without_lone_surrogates(text)
        if len(text) > max_chars:
            text = text[:max_chars] + f"\n[truncated: {len(text) - max_chars} more characters]"
        return Message(role="tool", content=text or "(empty result)", tool_call_id=call.id, name=call.name,
                       is_error=error, facts=extras.facts, reply_parts=extras.reply_parts)

    tool = tools.get(call.name)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        return result(f"Error: there is no tool named {call.name!r}. Available tools: {known}.", True)
    try:
        args = call.parsed_arguments()
    except ValueError as exc:
        return result(f"Error: the arguments are not a JSON object ({exc}).", True)
    problems = tool.argument_problems(args)
    if problems:  # the handler (and the game engine or MCP server behind it) never sees a call it did not declare
        return result(f"Error: invalid arguments for {call.name}: {'; '.join(problems)}. The tool was not called; "
                      "call it again with arguments that match its parameters.", True)

    outcome: dict[str, Any] = {}
    conversation_id, input_id = _TURN.get() or ("", "")
    context = contextvars.copy_context()  # a new thread starts with an empty context otherwise
    tracer = _tracer

    def target() -> None:
        _CALL.set(ToolCallContext(conversation_id, input_id, call.id))
        try:
            with tracer(call) if tracer is not None else _UNTRACED as traced:
                value = tool.handler(**args)
                if tool.game:
                    value, outcome["extras"] = split_result(value, max_chars)
                outcome["value"] = _encode_result(value)
                traced(outcome["value"])
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
    return result(outcome.get("value", ""), extras=outcome.get("extras", _NO_EXTRAS))
