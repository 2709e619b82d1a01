"""Validate request bodies against the official SDKs' request types and the providers' semantic rules."""

from __future__ import annotations

import itertools
from typing import Any

from anthropic.types.assistant_message_param import AssistantMessageParam
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from anthropic.types.user_message_param import UserMessageParam
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionSystemMessageParam,
    ChatCompletionToolMessageParam,
    ChatCompletionUserMessageParam,
)
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from pydantic import TypeAdapter

_openai = TypeAdapter(CompletionCreateParamsNonStreaming)
_anthropic = TypeAdapter(MessageCreateParamsNonStreaming)
_OPENAI_MESSAGES = {"system": ChatCompletionSystemMessageParam, "user": ChatCompletionUserMessageParam,
                    "assistant": ChatCompletionAssistantMessageParam, "tool": ChatCompletionToolMessageParam}


def _keys(td: Any) -> set[str]:
    return set(td.__required_keys__) | set(td.__optional_keys__)


def no_unknown_keys(body: dict[str, Any], params: Any, messages: dict[str, Any] | Any) -> None:
    """The SDK types ignore unknown keys when validating; the real APIs reject many. Refuse them here."""
    extra = set(body) - _keys(params)
    assert not extra, f"unknown top-level keys: {extra}"
    for m in body["messages"]:
        td = messages[m["role"]] if isinstance(messages, dict) else messages
        extra = set(m) - _keys(td)
        assert not extra, f"unknown keys in a {m['role']} message: {extra}"


def check_openai(body: dict[str, Any]) -> None:
    _openai.validate_python(body, strict=False)
    no_unknown_keys(body, CompletionCreateParamsNonStreaming, _OPENAI_MESSAGES)
    msgs = body["messages"]
    pending: set[str] = set()
    for m in msgs:
        assert m.get("content") not in ("", []) or m.get("tool_calls"), f"empty content: {m}"
        if m["role"] == "tool":
            assert m["tool_call_id"] in pending, f"result without its call: {m}"
            pending.discard(m["tool_call_id"])
            continue
        assert not pending, f"tool calls without results before {m['role']}: {pending}"
        if m["role"] == "assistant":
            pending = {c["id"] for c in m.get("tool_calls") or []}
    assert not pending, f"unanswered tool calls at the end: {pending}"


def check_anthropic(body: dict[str, Any]) -> None:
    _anthropic.validate_python(body, strict=False)
    no_unknown_keys(body, MessageCreateParamsNonStreaming, {"user": UserMessageParam, "assistant": AssistantMessageParam})
    msgs = body["messages"]
    assert msgs and msgs[0]["role"] == "user", "must start with the user"
    for a, b in itertools.pairwise(msgs):
        assert a["role"] != b["role"], "roles must alternate"
    for i, m in enumerate(msgs):
        blocks = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        assert blocks, "empty content"
        for b in blocks:
            if b["type"] == "text":
                assert b["text"].strip(), "empty text block"
        if m["role"] == "assistant":
            uses = {b["id"] for b in blocks if b["type"] == "tool_use"}
            if uses:
                nxt = msgs[i + 1] if i + 1 < len(msgs) else None
                assert nxt is not None, "tool_use without a following tool_result"
                nblocks = nxt["content"]
                results = [b for b in nblocks if b["type"] == "tool_result"]
                assert {b["tool_use_id"] for b in results} == uses, "each tool_use answered by its result"
                firsts = [b["type"] for b in nblocks][: len(results)]
                assert all(t == "tool_result" for t in firsts), "tool results come first"
        if m["role"] == "user" and i > 0:
            prev = msgs[i - 1]
            prev_uses = {b["id"] for b in prev["content"] if isinstance(prev["content"], list) and b["type"] == "tool_use"}
            for b in blocks:
                if b["type"] == "tool_result":
                    assert b["tool_use_id"] in prev_uses, "tool_result without its tool_use"
    if any(b.get("type") in ("tool_use", "tool_result") for m in msgs for b in m["content"] if isinstance(b, dict)):
        assert body.get("tools"), "tool blocks need tool definitions"
