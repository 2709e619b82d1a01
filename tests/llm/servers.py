"""Loopback HTTP servers that speak the providers' wire protocols from a script.

Each scripted step is ``(status, body, headers)`` or a callable ``request_json -> step``, or one of the
special faults: ``("sleep", seconds, step)``, ``("raw", status, bytes)``, ``("close",)`` (drop the
connection without answering). Every request body is recorded for validation.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from typing import Any

from tests.support.loopback import LoopbackServer

Step = Any


class ScriptedServer:
    def __init__(self) -> None:
        self.script: deque[Step] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self.lock = threading.Lock()
        self.default: Step | None = None
        self.http = LoopbackServer(self._answer).start()

    def _answer(self, path: str, headers: dict[str, str], body: Any) -> Any:
        with self.lock:
            self.requests.append(body)
            self.headers.append(headers)
            self.paths.append(path)
            step = self.script.popleft() if self.script else self.default
        if callable(step):
            step = step(body)
        while isinstance(step, tuple) and step and step[0] == "sleep":
            time.sleep(step[1])
            step = step[2]
        if isinstance(step, tuple) and step and step[0] == "close":
            return None
        if isinstance(step, tuple) and step and step[0] == "raw":
            return step[1], step[2], {}
        return step if step is not None else (500, {"error": "no script"}, {})

    @property
    def url(self) -> str:
        return self.http.url

    def push(self, *steps: Step) -> None:
        self.script.extend(steps)

    def stop(self) -> None:
        self.http.stop()


def openai_text(text: str, *, finish: str = "stop", usage: tuple[int, int, int] = (10, 5, 0), **extra: Any) -> Step:
    return (200, {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
                  "choices": [{"index": 0, "finish_reason": finish,
                               "message": {"role": "assistant", "content": text, "refusal": None, **extra}}],
                  "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                            "total_tokens": usage[0] + usage[1],
                            "prompt_tokens_details": {"cached_tokens": usage[2]}}}, {})


def openai_tools(*calls: tuple[str, str, dict[str, Any]]) -> Step:
    return (200, {"id": "chatcmpl-2", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
                  "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                      "role": "assistant", "content": None, "refusal": None,
                      "tool_calls": [{"id": cid, "type": "function",
                                      "function": {"name": name, "arguments": json.dumps(args)}}
                                     for cid, name, args in calls]}}],
                  "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28}}, {})


def anthropic_blocks(*blocks: dict[str, Any], stop: str = "end_turn", usage: dict[str, int] | None = None) -> Step:
    return (200, {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
                  "content": list(blocks), "stop_reason": stop, "stop_sequence": None,
                  "usage": usage or {"input_tokens": 12, "output_tokens": 6}}, {})


def error(status: int, message: str, kind: str = "error", headers: dict[str, str] | None = None) -> Step:
    return (status, {"error": {"message": message, "type": kind, "code": kind}}, headers or {})
