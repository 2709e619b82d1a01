"""Loopback peers for the tool-call tests: a game engine that counts every call per identity, and an OpenAI-style
model that answers a user text with a tool call and a tool result with a reply that quotes it.

The engine takes both callers: the Python tool's ``{"item", "nonce"}`` (identity: the ``nonce``, worker: the
``X-Worker-Pid`` header) and a manifest HTTP tool's ``{"conversation_id", "input_id", "call_id", "arguments"}``
(identity: the ``Idempotency-Key`` header, worker: the ``X-Worker`` header's name, turned into a pid by
``GameEngine.pid_of``).

The model draws a fresh call id and a fresh ``nonce`` argument on every call, as a real model does (its ids and
arguments differ on every call), so a retried turn that asked the model again would reach the engine under a new
identity; a turn that replays its journal reaches it under the recorded one.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.support.loopback import LoopbackPeer, LoopbackServer


def _quiet(server: LoopbackServer) -> LoopbackServer:
    """Killed workers leave answers with nobody to read them: do not print each broken pipe."""

    def handle_error(request: Any, client_address: Any) -> None:
        return None

    server.server.handle_error = handle_error  # type: ignore[method-assign]
    return server


@dataclass
class Call:
    """One request the engine received: the identity (``nonce``: the argument, or an HTTP tool's Idempotency-Key),
    the item, the worker pid, when it arrived and when its answer was written (0 while in flight); for an HTTP tool
    also the ids its body carried."""

    nonce: str
    item: str
    pid: int
    arrived: float
    answered: float = 0.0
    call_id: str = ""
    conversation_id: str = ""
    input_id: str = ""


@dataclass
class GameEngine(LoopbackPeer):
    """``POST /give`` gives an item; answers ``{"receipt": "r-<nonce>", "item": ...}`` after ``delay`` seconds.
    ``on_call(call)`` runs on arrival, ``on_answered(call)`` after the answer is written (kill hooks)."""

    delay: float = 0.2
    calls: list[Call] = field(default_factory=list)
    on_call: Callable[[Call], None] | None = None
    on_answered: Callable[[Call], None] | None = None
    pid_of: Callable[[str], int] | None = None  # an HTTP tool's X-Worker name -> that worker's pid now
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.http = _quiet(LoopbackServer(self._answer))

    def _answer(self, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any, dict[str, str]]:
        if "arguments" in body:  # a manifest HTTP tool: the identity is the Idempotency-Key header
            worker = headers.get("x-worker", "")
            call = Call(headers.get("idempotency-key", ""), str(body["arguments"].get("item")),
                        self.pid_of(worker) if self.pid_of is not None else 0, time.monotonic(),
                        call_id=str(body.get("call_id")), conversation_id=str(body.get("conversation_id")),
                        input_id=str(body.get("input_id")))
        else:
            call = Call(str(body.get("nonce")), str(body.get("item")), int(headers.get("x-worker-pid", "0")),
                        time.monotonic(), call_id=f"call_{body.get('nonce')}")
        with self.lock:
            self.calls.append(call)
        if self.on_call is not None:
            self.on_call(call)
        time.sleep(self.delay)
        call.answered = time.monotonic()
        if self.on_answered is not None:
            threading.Thread(target=self.on_answered, args=(call,), daemon=True).start()
        return 200, {"receipt": f"r-{call.nonce}", "item": call.item}, {}

    def by_item(self) -> dict[str, list[Call]]:
        out: dict[str, list[Call]] = {}
        with self.lock:
            for c in self.calls:
                out.setdefault(c.item, []).append(c)
        return out


class ToolCallingModel(LoopbackPeer):
    """OpenAI Chat Completions on loopback: the last user text gets ``give_item(item=<text>, nonce=<fresh>)``
    after ``tool_delay``; once a tool result follows it, the reply is ``done:<text>:<result>`` after
    ``final_delay``."""

    def __init__(self, *, tool_delay: float = 0.1, final_delay: float = 1.0) -> None:
        self.tool_delay, self.final_delay = tool_delay, final_delay
        self.rounds: dict[str, int] = {}  # tool rounds asked, per user text
        self.lock = threading.Lock()
        self.http = _quiet(LoopbackServer(lambda path, headers, body: self.answer(body)))

    @property
    def base_url(self) -> str:
        return f"{self.http.url}/v1"

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        messages = body.get("messages", [])
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        text = str(messages[last_user].get("content", "")) if last_user >= 0 else ""
        results = [str(m.get("content", "")) for m in messages[last_user + 1:] if m.get("role") == "tool"]
        if results:
            time.sleep(self.final_delay)
            message: dict[str, Any] = {"role": "assistant", "content": f"done:{text}:{results[-1]}"}
            finish = "stop"
        else:
            time.sleep(self.tool_delay)
            with self.lock:
                self.rounds[text] = self.rounds.get(text, 0) + 1
            nonce = uuid.uuid4().hex
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{nonce}", "type": "function",
                 "function": {"name": "give_item", "arguments": json.dumps({"item": text, "nonce": nonce})}}]}
            finish = "tool_calls"
        return 200, {"id": "chatcmpl-tools", "object": "chat.completion", "created": int(time.time()),
                     "model": body.get("model"), "choices": [{"index": 0, "finish_reason": finish, "message": message}],
                     "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}}, {}
