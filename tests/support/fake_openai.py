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

from tests.support.loopback import LoopbackServer


class FakeOpenAI:
    def __init__(self, *, delay: float = 0.0) -> None:
        self.delay = delay
        self.errors: deque[tuple[int, dict[str, Any], dict[str, str]]] = deque()
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.summary_delay = 0.0
        self.fault: Any = None  # callable(body) -> (status, payload, headers) | None, consulted on every request
        self.on_request: Any = None  # callable(body) -> None, e.g. to kill the worker that asked
        self.in_flight = 0
        self.max_in_flight = 0
        self.http = LoopbackServer(lambda path, headers, body: self.answer(body))

    @property
    def base_url(self) -> str:
        return f"{self.http.url}/v1"

    def start(self) -> FakeOpenAI:
        self.http.start()
        return self

    def stop(self) -> None:
        self.http.stop()

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
            users = [m for m in messages if m.get("role") == "user"]
            last = users[-1].get("content", "") if users else ""
            if isinstance(last, list):
                last = " ".join(str(p.get("text", "")) for p in last if isinstance(p, dict))
            text = f"ack:{last}"
        prompt = sum(len(str(m.get("content", ""))) for m in messages) // 4 + 10
        return 200, {
            "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": body.get("model"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text, "refusal": None}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": len(text) // 4 + 1,
                      "total_tokens": prompt + len(text) // 4 + 1},
        }, {}
