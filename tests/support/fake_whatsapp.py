"""A loopback server standing in for the WhatsApp Cloud API send endpoint.

Records every send (path, headers, JSON body) and answers success with a fresh wamid, or scripted errors.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # the default backlog of 5 refuses connections under a burst
    daemon_threads = True


class FakeWhatsApp:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.errors: deque[tuple[int, dict[str, Any], dict[str, str]]] = deque()
        self.delay = 0.0
        self.fault: Any = None  # callable(body) -> (status, payload, headers) | None
        self.lock = threading.Lock()
        self._ids = itertools.count(1)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out as separate writes

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
                status, payload, headers = outer.answer(self.path, dict(self.headers), body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v21.0"

    def start(self) -> FakeWhatsApp:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def fail(self, code: int, status: int = 400, times: int = 1, message: str = "injected") -> None:
        for _ in range(times):
            self.errors.append((status, {"error": {"message": f"(#{code}) {message}", "type": "OAuthException",
                                                   "code": code, "fbtrace_id": "x"}}, {}))

    def answer(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        time.sleep(self.delay)
        with self.lock:
            if self.errors:
                return self.errors.popleft()
            injected = self.fault(body) if self.fault is not None else None
            if injected is not None:
                return injected
            wamid = f"wamid.out{next(self._ids)}"
            self.sent.append({"path": path, "body": body, "wamid": wamid})
            self.headers.append(headers)
        to = body.get("to") or body.get("recipient")
        return 200, {"messaging_product": "whatsapp", "contacts": [{"input": to, "wa_id": to}],
                     "messages": [{"id": wamid}]}, {}

    def texts_for(self, recipient: str) -> list[str]:
        with self.lock:
            return [s["body"]["text"]["body"] for s in self.sent
                    if (s["body"].get("to") or s["body"].get("recipient")) == recipient]
