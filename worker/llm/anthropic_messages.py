"""Anthropic Messages over httpx.

The system prompt goes in the top-level ``system`` field. Tool results become ``tool_result`` blocks in a
user message. Roles must alternate and start with the user: consecutive same-role content is merged here,
at request time, never in the stored state. Assistant messages that came from Anthropic are sent back with
their blocks unchanged (thinking blocks keep their signatures, which extended thinking requires in a tool loop).
Options: prompt caching (``cache_control`` breakpoints on the stable prefix, on by default) and extended
thinking with a token budget.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping
from typing import Any

from worker.conversation.messages import (
    EVENT_MARK,
    FRAMING_NOTE,
    Message,
    ToolCall,
    event_text,
    player_text,
    unseen_media_text,
)
from worker.conversation.model import Attachment, FinishReason, ModelRequest, ModelResponse, Usage
from worker.errors import ConfigurationError, ModelResponseError
from worker.llm.provider import HttpModel
from worker.llm.transport import RetryPolicy

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
CONTINUE_PLACEHOLDER = "(The conversation continues.)"

_STOP: dict[str, FinishReason] = {
    "end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length",
    "refusal": "refusal", "pause_turn": "other", "model_context_window_exceeded": "length",
}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def reads_images_by_name(model: str) -> bool:
    """Claude 3 and later read pictures; Claude 1, 2 and Instant do not."""
    m = model.lower().rsplit("/", 1)[-1]
    return not m.startswith(("claude-1", "claude-2", "claude-instant"))


def _user_blocks(m: Message, attachments: Mapping[str, Attachment]) -> list[dict[str, Any]]:
    """Text; a photo of this turn as an image block then its caption (Anthropic's advice: the picture first);
    an older photo, whose bytes the request does not carry, as text that says a photo came."""
    if m.media is None:
        return [_text(player_text(m.content))]
    picture = attachments.get(m.media.id)
    if picture is None:
        return [_text(unseen_media_text(m))]
    image = {"type": "image", "source": {"type": "base64", "media_type": picture.mime_type,
                                         "data": base64.b64encode(picture.data).decode("ascii")}}
    return [image, _text(player_text(m.content))]  # an empty caption is dropped by render_messages


def _assistant_blocks(m: Message) -> list[dict[str, Any]]:
    if m.raw is not None and isinstance(m.raw.get("content"), list):
        return copy.deepcopy(m.raw["content"])
    blocks: list[dict[str, Any]] = []
    if m.content.strip():
        blocks.append(_text(m.content))
    for c in m.tool_calls:
        try:
            args = json.loads(c.arguments or "{}")
        except ValueError:
            args = {}
        blocks.append({"type": "tool_use", "id": c.id, "name": c.name, "input": args if isinstance(args, dict) else {}})
    return blocks


def render_messages(request: ModelRequest) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        blocks = [b for b in blocks if not (b.get("type") == "text" and not str(b.get("text", "")).strip())]
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for m in request.messages:
        if m.role == "user":
            add("user", _user_blocks(m, request.attachments))
        elif m.role in ("event", "system"):
            # Anthropic has no role for them: a text block of its own that starts with the mark, which no player
            # text can hold (player_text), and the system prompt says so (framed_system).
            add("user", [_text(event_text(m))])
        elif m.role == "assistant":
            add("assistant", _assistant_blocks(m))
        elif m.role == "tool":
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.tool_call_id or "",
                                     "content": m.content or "(empty)"}
            if m.is_error:
                block["is_error"] = True
            add("user", [block])
    if not turns or turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [_text(CONTINUE_PLACEHOLDER)]})
    # Within a user turn, tool results must come before other content.
    for t in turns:
        if t["role"] == "user":
            t["content"].sort(key=lambda b: 0 if b.get("type") == "tool_result" else 1)
    return turns


CACHE = {"type": "ephemeral"}
# Blocks a cache_control breakpoint may sit on (not thinking blocks, not empty text).
_CACHEABLE = ("text", "tool_use", "tool_result", "image", "document")
MIN_THINKING_BUDGET = 1024


def _mark_last_block(message: dict[str, Any]) -> bool:
    for block in reversed(message["content"]):
        if block.get("type") in _CACHEABLE:
            block["cache_control"] = dict(CACHE)
            return True
    return False


def add_cache_breakpoints(body: dict[str, Any], stable: int = 0) -> None:
    """Mark the stable prefix for Anthropic's prompt cache (at most 4 breakpoints).

    0. With ``stable`` (the caller's prompt is ``system[:stable]``, the pinned items and the summary follow): the end
       of the caller's prompt, so that after a compaction the tools and the prompt are still read from the cache.
    1. The end of the system prompt, which carries the summary and pinned items: with the tool definitions
       before it, the part of the prompt that changes only on compaction.
    2. The newest message: the next round trip (of this turn's tool loop, or the next turn) reads the whole
       history up to here from the cache.
    3. The user turn before the newest one: where the previous call wrote its breakpoint, so this call reads
       it even when its new part is longer than the cache's look-back of about 20 blocks.

    A prefix shorter than the model's minimum (1,024 or 2,048 tokens) is simply not cached, at no cost.
    """
    system = body.get("system")
    if isinstance(system, str) and system:
        head, rest = (system[:stable], system[stable:].lstrip("\n")) if 0 < stable < len(system) else (system, "")
        body["system"] = [{"type": "text", "text": text, "cache_control": dict(CACHE)} for text in (head, rest) if text]
    messages = body["messages"]
    if messages:
        _mark_last_block(messages[-1])
    users = [i for i, m in enumerate(messages[:-1]) if m["role"] == "user"]
    if users:
        _mark_last_block(messages[users[-1]])


def framed_system(request: ModelRequest) -> str | None:
    """The system prompt, with :data:`~worker.conversation.messages.FRAMING_NOTE` after it when the history holds
    game events or operators' notes, or the request has context after the history (the note then stays put: the
    prompt cache keeps working)."""
    if not request.after_history and not any(m.role in ("event", "system") for m in request.messages):
        return request.system
    return f"{request.system}\n\n{FRAMING_NOTE}" if request.system else FRAMING_NOTE


def build_body(model: str, request: ModelRequest, *, max_tokens: int, temperature: float | None,
               prompt_cache: bool = False, thinking_budget: int = 0) -> dict[str, Any]:
    """The Messages API body. With ``thinking_budget`` (chat calls only; a summary needs no thinking) Claude
    thinks first: the budget is added to ``max_tokens`` (which must exceed it) and no temperature is sent
    (thinking accepts only the default)."""
    thinking = thinking_budget if request.purpose == "chat" else 0
    body: dict[str, Any] = {"model": model, "max_tokens": (request.max_tokens or max_tokens) + thinking,
                            "messages": render_messages(request)}
    system = framed_system(request)
    if system:
        body["system"] = system
    if request.tools:
        body["tools"] = [{"name": t.name, "description": t.description, "input_schema": t.parameters}
                         for t in request.tools]
        body["tool_choice"] = {"type": request.tool_choice}
    temp = request.temperature if request.temperature is not None else temperature
    if thinking:
        body["thinking"] = {"type": "enabled", "budget_tokens": thinking}
    elif temp is not None:
        body["temperature"] = temp
    if prompt_cache:
        # A second breakpoint only when pinned items or a summary follow the caller's prompt (not for the note alone).
        add_cache_breakpoints(body, request.system_stable if request.system_stable < len(request.system or "") else 0)
    if request.recalled:
        add_recalled(body["messages"], request.recalled)
    if request.after_history:
        add_after_history(body["messages"], request.after_history)
    return body


def add_recalled(turns: list[dict[str, Any]], text: str) -> None:
    """Quoted past conversation, as a text block of the last user turn with no event mark (it quotes the player's
    words, which must not read as the game's): after the cache breakpoints, so the cached prefix ends before it."""
    block = _text(text)
    if turns and turns[-1]["role"] == "user":
        turns[-1]["content"].append(block)
    else:
        turns.append({"role": "user", "content": [block]})


def add_after_history(turns: list[dict[str, Any]], text: str) -> None:
    """The request's context after the history, as the game's words (a marked text block) at the end of the last
    user turn: after the cache breakpoints, so the cached prefix ends before it (it changes between requests)."""
    block = _text(f"{EVENT_MARK}{text}")
    if turns and turns[-1]["role"] == "user":
        turns[-1]["content"].append(block)
    else:
        turns.append({"role": "user", "content": [block]})


def parse_response(data: dict[str, Any]) -> ModelResponse:
    try:
        if data.get("type") == "error":
            raise ModelResponseError(f"anthropic answered an error object: {data.get('error')}", provider="anthropic")
        blocks = data["content"]
        if not isinstance(blocks, list):
            raise TypeError("content is not a list")
        texts = [str(b.get("text", "")) for b in blocks if b.get("type") == "text"]
        calls = [ToolCall(id=str(b["id"]), name=str(b["name"]), arguments=json.dumps(b.get("input") or {}))
                 for b in blocks if b.get("type") == "tool_use"]
        raw_stop = data.get("stop_reason")
        finish: FinishReason = _STOP.get(str(raw_stop), "other") if raw_stop else "stop"
        if calls and finish == "stop":
            finish = "tool_calls"
        u = data.get("usage") or {}
        read = int(u.get("cache_read_input_tokens") or 0)
        created = int(u.get("cache_creation_input_tokens") or 0)
        usage = Usage(prompt_tokens=int(u.get("input_tokens") or 0) + read + created,
                      completion_tokens=int(u.get("output_tokens") or 0), cached_tokens=read,
                      cache_creation_tokens=created)
    except ModelResponseError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ModelResponseError(f"anthropic answered with an unexpected shape: {type(exc).__name__}: {exc}",
                                 provider="anthropic", status=200) from None
    raw = {"role": "assistant", "content": blocks}
    message = Message(role="assistant", content="".join(texts), tool_calls=tuple(calls), raw=raw)
    return ModelResponse(message=message, finish_reason=finish, usage=usage, raw_finish_reason=raw_stop,
                         model=data.get("model"))


class AnthropicModel(HttpModel):
    """A :class:`~worker.conversation.model.Model` over ``POST {base_url}/v1/messages``."""

    PROVIDER = "anthropic"
    DEFAULT_BASE_URL = DEFAULT_BASE_URL
    PATH = "/v1/messages"

    def __init__(self, *, model: str, base_url: str | None = None, api_key: str | None = None,
                 timeout: float = 60.0, connect_timeout: float = 5.0, max_retries: int = 2, max_tokens: int = 1024,
                 temperature: float | None = None, breaker_threshold: int = 5, breaker_reset: float = 30.0,
                 retry: RetryPolicy | None = None, extra_headers: dict[str, str] | None = None,
                 prompt_cache: bool = True, thinking_budget: int = 0, vision: bool | None = None) -> None:
        if thinking_budget and thinking_budget < MIN_THINKING_BUDGET:
            raise ConfigurationError(f"an extended-thinking budget must be at least {MIN_THINKING_BUDGET} tokens "
                                     f"(got {thinking_budget}); 0 turns thinking off")
        auth = {"x-api-key": api_key} if api_key else {}
        super().__init__(model=model, base_url=base_url,
                         headers={"anthropic-version": API_VERSION, **(extra_headers or {}), **auth}, timeout=timeout,
                         connect_timeout=connect_timeout, max_retries=max_retries, retry=retry,
                         breaker_threshold=breaker_threshold, breaker_reset=breaker_reset, vision=vision,
                         reads_images_by_name=reads_images_by_name)
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.prompt_cache = prompt_cache
        self.thinking_budget = thinking_budget

    def body(self, request: ModelRequest) -> dict[str, Any]:
        return build_body(self._model, self._readable(request), max_tokens=self.max_tokens,
                          temperature=self.temperature, prompt_cache=self.prompt_cache,
                          thinking_budget=self.thinking_budget)

    def parse(self, data: dict[str, Any]) -> ModelResponse:
        return parse_response(data)
