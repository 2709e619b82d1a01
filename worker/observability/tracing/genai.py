"""Model and tool call spans as the OpenTelemetry GenAI semantic conventions name them: ``chat {model}`` with
``gen_ai.operation.name``, ``gen_ai.provider.name`` (and the older ``gen_ai.system``), ``gen_ai.request.model``,
``gen_ai.usage.input_tokens`` / ``output_tokens`` / ``cache_read.input_tokens`` / ``cache_creation.input_tokens``,
``gen_ai.conversation.id``; ``execute_tool {name}`` with ``gen_ai.tool.name`` and ``gen_ai.tool.call.id``.

Message content (``gen_ai.system_instructions``, ``gen_ai.input.messages``, ``gen_ai.output.messages``, a tool call's
arguments and result) goes on the spans only with the conventions' opt-in,
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``: it is the player's text, personal data."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from opentelemetry import trace

from worker.conversation.messages import Message, ToolCall
from worker.conversation.model import Model, ModelRequest, ModelResponse
from worker.observability.tracing import capture_content


def _message(m: Message) -> dict[str, Any]:
    """One message in the conventions' JSON form: a role and its parts."""
    parts: list[dict[str, Any]] = []
    if m.role == "tool":
        parts.append({"type": "tool_call_response", "id": m.tool_call_id, "response": m.content})
    elif m.content:
        parts.append({"type": "text", "content": m.content})
    parts.extend({"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls)
    return {"role": m.role, "parts": parts}


class ModelCalls:
    """The core's model call tracer (:func:`worker.conversation.observe.trace_model_calls`)."""

    def __init__(self, tracer: trace.Tracer, conversation: ContextVar[str | None]) -> None:
        self.tracer, self.conversation = tracer, conversation

    @contextmanager
    def __call__(self, model: Model, request: ModelRequest) -> Iterator[Callable[[ModelResponse], None]]:
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": model.provider, "gen_ai.system": model.provider,
            "gen_ai.request.model": model.model_name, "parley.model_call.purpose": request.purpose}
        cid = self.conversation.get()
        if cid:
            attrs["gen_ai.conversation.id"] = cid
        if request.max_tokens is not None:
            attrs["gen_ai.request.max_tokens"] = request.max_tokens
        if request.temperature is not None:
            attrs["gen_ai.request.temperature"] = request.temperature
        content = capture_content()
        if content:
            if request.system:
                attrs["gen_ai.system_instructions"] = json.dumps([{"type": "text", "content": request.system}])
            attrs["gen_ai.input.messages"] = json.dumps([_message(m) for m in request.messages], ensure_ascii=False)
        with self.tracer.start_as_current_span(f"chat {model.model_name}", kind=trace.SpanKind.CLIENT,
                                               attributes=attrs) as span:
            try:
                yield lambda response: _answered(span, response, content)
            except BaseException as exc:
                span.set_attribute("error.type", type(exc).__name__)
                raise


def _answered(span: trace.Span, response: ModelResponse, content: bool) -> None:
    span.set_attribute("gen_ai.response.finish_reasons", [response.raw_finish_reason or response.finish_reason])
    if response.model:
        span.set_attribute("gen_ai.response.model", response.model)
    usage = response.usage
    if usage is not None:
        span.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens)
        span.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cached_tokens)
        span.set_attribute("gen_ai.usage.cache_creation.input_tokens", usage.cache_creation_tokens)
    if content:
        span.set_attribute("gen_ai.output.messages", json.dumps([_message(response.message)], ensure_ascii=False))


class ToolCalls:
    """The core's tool call tracer (:func:`worker.conversation.tools.trace_tool_calls`): a span around the handler,
    in the thread that runs it (the context is copied into it, so the span is the model call's sibling)."""

    def __init__(self, tracer: trace.Tracer, conversation: ContextVar[str | None]) -> None:
        self.tracer, self.conversation = tracer, conversation

    @contextmanager
    def __call__(self, call: ToolCall) -> Iterator[Callable[[str], None]]:
        attrs: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name,
                                 "gen_ai.tool.call.id": call.id, "gen_ai.tool.type": "function"}
        cid = self.conversation.get()
        if cid:
            attrs["gen_ai.conversation.id"] = cid
        content = capture_content()
        if content:
            attrs["gen_ai.tool.call.arguments"] = call.arguments
        with self.tracer.start_as_current_span(f"execute_tool {call.name}", attributes=attrs) as span:
            try:
                yield (lambda result: span.set_attribute("gen_ai.tool.call.result", result)) if content \
                    else _ignore
            except BaseException as exc:
                span.set_attribute("error.type", type(exc).__name__)
                raise


def _ignore(result: str) -> None:
    """What a tool span does with the result when content is not captured."""
