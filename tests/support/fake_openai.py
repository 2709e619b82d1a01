"""A loopback server speaking OpenAI Chat Completions, answering deterministically from the request.

The answer names the last user text (``ack:<text>``) so an end-to-end checker can tell which input each
reply belongs to. Faults on cue: a delay, a queue of error statuses, a summariser mode.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from typing import Any

from tests.support.loopback import LoopbackPeer, LoopbackServer


class FakeOpenAI(LoopbackPeer):
    def __init__(self, *, delay: float = 0.0) -> None:
        self.delay = delay
        self.errors: deque[tuple[int, dict[str, Any], dict[str, str]]] = deque()
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.summary_delay = 0.0
        self.fault: Any = None  # callable(body) -> (status, payload, headers) | None, consulted on every request
        self.on_request: Any = None  # callable(body) -> None, e.g. to kill the worker that asked
        # callable(body) -> [(tool name, arguments)] | None: the tools to call for a user text no tool has
        # answered yet; once the results are in, the answer is "ack:<text> | <result> | <result> ..."
        self.plan_tools: Any = None
        self.in_flight = 0
        self.max_in_flight = 0
        self.http = LoopbackServer(lambda path, headers, body: self.answer(body))

    @property
    def base_url(self) -> str:
        return f"{self.http.url}/v1"

    def fail(self, status: int, times: int = 1, *, retry_after: float | None = None) -> None:
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
        for _ in range(times):
            self.errors.append((status, {"error": {"message": f"injected {status}", "type": "server_error"}}, headers))

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        with self.lock:
            self.requests.append(body)
            injected = self.errors.popleft() if self.errors else None
        if self.on_request is not None:
            self.on_request(body)
        if injected is None and self.fault is not None:
            injected = self.fault(body)
        if injected is not None:
            if injected[0] == "raw":
                return injected[1], injected[2], {}
            return injected
        messages = body.get("messages", [])
        system = next((m.get("content", "") for m in messages if m.get("role") == "system"), "") or ""
        is_summary = "running summary" in str(system)
        if is_summary:
            time.sleep(self.summary_delay)
            text = "Summary: " + str(len(json.dumps(messages)))
        else:
            with self.lock:
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                time.sleep(self.delay)
            finally:
                with self.lock:
                    self.in_flight -= 1
            calls = self._tool_calls(body, messages)
            if calls:
                return 200, _completion(body, {"role": "assistant", "content": None, "tool_calls": calls},
                                        "tool_calls", messages), {}
            users = [m for m in messages if m.get("role") == "user"]
            last = users[-1].get("content", "") if users else ""
            if isinstance(last, list):
                last = " ".join(str(p.get("text", "")) for p in last if isinstance(p, dict))
            text = f"ack:{last}"
            results = _tool_results_since_last_user(messages)
            if results:
                text += " | " + " | ".join(results)
        prompt = sum(len(str(m.get("content", ""))) for m in messages) // 4 + 10
        return 200, {
            "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": body.get("model"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text, "refusal": None}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": len(text) // 4 + 1,
                      "total_tokens": prompt + len(text) // 4 + 1},
        }, {}

    def _tool_calls(self, body: dict[str, Any], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The tool calls ``plan_tools`` asks for, when the last message is the user's (no results yet)."""
        if self.plan_tools is None or not messages or messages[-1].get("role") != "user":
            return []
        offered = {t["function"]["name"] for t in body.get("tools") or []}
        plan = self.plan_tools(body) or []
        with self.lock:
            base = len(self.requests)
        return [{"id": f"call_{base}_{i}", "type": "function",
                 "function": {"name": name, "arguments": json.dumps(args)}}
                for i, (name, args) in enumerate(plan) if name in offered]


def _tool_results_since_last_user(messages: list[dict[str, Any]]) -> list[str]:
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    return [str(m.get("content", "")) for m in messages[last_user + 1:] if m.get("role") == "tool"]


def _completion(body: dict[str, Any], message: dict[str, Any], finish: str,
                messages: list[dict[str, Any]]) -> dict[str, Any]:
    prompt = sum(len(str(m.get("content", ""))) for m in messages) // 4 + 10
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model"), "choices": [{"index": 0, "finish_reason": finish, "message": message}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 10, "total_tokens": prompt + 10}}


def hold_first_request(llm: FakeOpenAI, timeout: float = 120.0) -> tuple[threading.Event, threading.Event]:
    """Keep the first model call in flight until the test says the worker that made it is dead: returns
    ``(first_call, killed)``; ``first_call`` is set once the call arrived, the test sets ``killed`` after the kill."""
    first_call, killed = threading.Event(), threading.Event()

    def hang_the_first_call(_: object) -> None:
        if not first_call.is_set():
            first_call.set()
            killed.wait(timeout)

    llm.on_request = hang_the_first_call
    return first_call, killed
