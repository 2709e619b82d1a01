"""OpenAI Chat Completions over httpx — also any OpenAI-compatible server (vLLM, Ollama, llama.cpp server,
LiteLLM) through ``base_url``."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from worker.conversation.messages import Message, ToolCall, event_text, player_text, unseen_media_text
from worker.conversation.model import Attachment, FinishReason, ModelRequest, ModelResponse, Usage
from worker.errors import ModelResponseError
from worker.llm.provider import HttpModel
from worker.llm.transport import RetryPolicy

DEFAULT_BASE_URL = "https://api.openai.com/v1"

# Fields of a response message that the API does not take back as input (output-only, or vendor
# reasoning that servers such as DeepSeek reject when sent back). Everything else is returned verbatim.
OUTPUT_ONLY = frozenset({"annotations", "reasoning_content", "reasoning", "parsed"})

_FINISH: dict[str, FinishReason] = {
    "stop": "stop", "tool_calls": "tool_calls", "function_call": "tool_calls", "length": "length",
    "content_filter": "content_filter",
}


def is_reasoning_family(model: str) -> bool:
    """OpenAI's reasoning models (o1, o3, o4-mini, ... and gpt-5): they refuse ``max_tokens`` (the limit is
    ``max_completion_tokens``, which also covers the hidden reasoning) and any temperature but the default."""
    m = model.lower().rsplit("/", 1)[-1]  # "openai/o3-mini" as some gateways name it
    return m.startswith(("o1", "o3", "o4", "gpt-5"))


# Families that read pictures (the "-mini" and preview o1/o3 models do not).
_VISION_PREFIXES = ("gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-5", "o1", "o3", "o4")
_TEXT_ONLY_PREFIXES = ("o1-mini", "o1-preview", "o3-mini")


def reads_images_by_name(model: str) -> bool:
    """Whether an OpenAI model name is of a family that reads pictures: gpt-4o, gpt-4.1, gpt-5 and the o-series
    (not o1-mini, o1-preview or o3-mini). Anything else (an open model behind a compatible server, an older
    GPT) is assumed not to: the ``vision`` option says otherwise."""
    m = model.lower().rsplit("/", 1)[-1]
    return m.startswith(_VISION_PREFIXES) and not m.startswith(_TEXT_ONLY_PREFIXES)


def _render_user(m: Message, attachments: Mapping[str, Attachment]) -> dict[str, Any]:
    """Text; a photo of this turn as content parts (caption, then the picture as a data URL); an older photo,
    whose bytes the request does not carry, as text that says a photo came."""
    if m.media is None:
        return {"role": "user", "content": player_text(m.content)}
    picture = attachments.get(m.media.id)
    if picture is None:
        return {"role": "user", "content": unseen_media_text(m)}
    parts: list[dict[str, Any]] = []
    if m.content.strip():
        parts.append({"type": "text", "text": player_text(m.content)})
    url = f"data:{picture.mime_type};base64,{base64.b64encode(picture.data).decode('ascii')}"
    parts.append({"type": "image_url", "image_url": {"url": url}})
    return {"role": "user", "content": parts}


def _render_assistant(m: Message) -> dict[str, Any]:
    if m.raw is not None and m.raw.get("role") == "assistant" and "type" not in m.raw:
        # A shallow copy is enough: the body is serialised at once and nothing below mutates nested values.
        out = {k: v for k, v in m.raw.items() if k not in OUTPUT_ONLY}
        if isinstance(out.get("audio"), dict):
            out["audio"] = {"id": out["audio"].get("id")}
        if out.get("audio") is None:
            out.pop("audio", None)
        if out.get("function_call") is None:
            out.pop("function_call", None)
        if not out.get("tool_calls"):
            out.pop("tool_calls", None)
        return out
    msg: dict[str, Any] = {"role": "assistant", "content": m.content or None}
    if m.tool_calls:
        msg["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                             for c in m.tool_calls]
    return msg


def render_messages(request: ModelRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    for m in request.messages:
        if m.role == "user":
            out.append(_render_user(m, request.attachments))
        elif m.role in ("event", "system"):
            # The game's events and operators' notes in the system role, which no player message can take: a
            # system message after the conversation started is context (invariant 8), and it is marked.
            out.append({"role": "system", "content": event_text(m)})
        elif m.role == "assistant":
            out.append(_render_assistant(m))
        elif m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content or "(empty)"})
    if request.recalled:
        # Quoted past conversation: after the history (the cached prefix stays as it was), in the user role, which
        # is where the player's words it quotes belong.
        out.append({"role": "user", "content": request.recalled})
    if request.after_history:
        # The context after the history (the game's keyed facts): last, where its changes leave the prefix the
        # prompt cache reuses as it was; in the system role, which no player message can take.
        out.append({"role": "system", "content": request.after_history})
    return out


def build_body(model: str, request: ModelRequest, *, max_tokens: int | None, temperature: float | None,
               max_tokens_field: str = "max_tokens") -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": render_messages(request)}
    if request.tools:
        body["tools"] = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                            "parameters": t.parameters}} for t in request.tools]
        body["tool_choice"] = request.tool_choice
    limit = request.max_tokens or max_tokens
    if limit:
        body[max_tokens_field] = limit
    temp = request.temperature if request.temperature is not None else temperature
    if temp is not None:
        body["temperature"] = temp
    return body


def parse_response(provider: str, data: dict[str, Any]) -> ModelResponse:
    try:
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ModelResponseError(f"{provider} answered without choices", provider=provider, status=200)
        choice = choices[0]
        raw = choice["message"]
        if not isinstance(raw, dict):
            raise TypeError("message is not an object")
        content = raw.get("content") or ""
        if isinstance(content, list):  # some compatible servers return content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        calls = []
        for tc in raw.get("tool_calls") or ():
            fn = tc["function"]
            args = fn.get("arguments") or "{}"
            calls.append(ToolCall(id=str(tc["id"]), name=str(fn["name"]),
                                  arguments=args if isinstance(args, str) else json.dumps(args)))
        raw_finish = choice.get("finish_reason")
        finish: FinishReason = _FINISH.get(str(raw_finish), "other") if raw_finish else "stop"
        if calls and finish in ("stop", "other"):
            finish = "tool_calls"
        refusal = raw.get("refusal")
        if refusal:
            finish = "refusal"
            content = content or str(refusal)
        usage = None
        u = data.get("usage")
        if isinstance(u, dict):
            details = u.get("prompt_tokens_details") or {}
            usage = Usage(prompt_tokens=int(u.get("prompt_tokens") or 0),
                          completion_tokens=int(u.get("completion_tokens") or 0),
                          cached_tokens=int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0)
    except ModelResponseError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ModelResponseError(f"{provider} answered with an unexpected shape: {type(exc).__name__}: {exc}",
                                 provider=provider, status=200) from None
    message = Message(role="assistant", content=str(content), tool_calls=tuple(calls), raw=raw)
    return ModelResponse(message=message, finish_reason=finish, usage=usage, raw_finish_reason=raw_finish,
                         model=data.get("model"))


class OpenAIChatModel(HttpModel):
    """A :class:`~worker.conversation.model.Model` over ``POST {base_url}/chat/completions``."""

    PROVIDER = "openai"
    DEFAULT_BASE_URL = DEFAULT_BASE_URL
    PATH = "/chat/completions"

    def __init__(self, *, model: str, base_url: str | None = None, api_key: str | None = None,
                 timeout: float = 60.0, connect_timeout: float = 5.0, max_retries: int = 2,
                 max_tokens: int | None = None, temperature: float | None = None,
                 breaker_threshold: int = 5, breaker_reset: float = 30.0, max_tokens_field: str | None = None,
                 retry: RetryPolicy | None = None, extra_headers: dict[str, str] | None = None,
                 vision: bool | None = None) -> None:
        # vision: None = by the model's name; a compatible server's model (llava, qwen-vl, ...) needs True.
        auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        super().__init__(model=model, base_url=base_url, headers={**(extra_headers or {}), **auth}, timeout=timeout,
                         connect_timeout=connect_timeout, max_retries=max_retries, retry=retry,
                         breaker_threshold=breaker_threshold, breaker_reset=breaker_reset, vision=vision,
                         reads_images_by_name=reads_images_by_name)
        self.max_tokens = max_tokens
        self.reasoning = is_reasoning_family(model)
        # Reasoning models accept only the default temperature: sending another fails every call with a 400.
        self.temperature = None if self.reasoning else temperature
        self.max_tokens_field = max_tokens_field or ("max_completion_tokens" if self.reasoning else "max_tokens")

    def body(self, request: ModelRequest) -> dict[str, Any]:
        if self.reasoning and request.temperature is not None:
            request = replace(request, temperature=None)
        return build_body(self._model, self._readable(request), max_tokens=self.max_tokens,
                          temperature=self.temperature, max_tokens_field=self.max_tokens_field)

    def parse(self, data: dict[str, Any]) -> ModelResponse:
        return parse_response(self.PROVIDER, data)
