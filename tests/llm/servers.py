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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Step = Any


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # the default backlog of 5 refuses connections under a burst
    daemon_threads = True


class ScriptedServer:
    def __init__(self) -> None:
        self.script: deque[Step] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self.lock = threading.Lock()
        self.default: Step | None = None
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out as separate writes

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                body = json.loads(raw or b"{}")
                with outer.lock:
                    outer.requests.append(body)
                    outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                    outer.paths.append(self.path)
                    step = outer.script.popleft() if outer.script else outer.default
                if callable(step):
                    step = step(body)
                while isinstance(step, tuple) and step and step[0] == "sleep":
                    time.sleep(step[1])
                    step = step[2]
                if isinstance(step, tuple) and step and step[0] == "close":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if isinstance(step, tuple) and step and step[0] == "raw":
                    _, status, data = step
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                status, payload, headers = step if step is not None else (500, {"error": "no script"}, {})
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def push(self, *steps: Step) -> None:
        self.script.extend(steps)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


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
