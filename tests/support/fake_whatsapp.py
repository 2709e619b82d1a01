"""A loopback server standing in for the WhatsApp Cloud API send endpoint.

Records every send (path, headers, JSON body) and answers success with a fresh wamid, or scripted errors.
Read receipts and typing indicators (``"status": "read"`` bodies) are recorded apart, in ``reads``, and have their
own scripted errors (``fail_reads``, ``read_fault``), so that they never take an error meant for a send.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from typing import Any

from tests.support.loopback import LoopbackServer


class FakeWhatsApp:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.errors: deque[tuple[int, dict[str, Any], dict[str, str]]] = deque()
        self.delay = 0.0
        self.fault: Any = None  # callable(body) -> (status, payload, headers) | None
        self.reads: list[dict[str, Any]] = []  # {"path", "body"} of each read receipt answered 200
        self.read_errors: deque[tuple[int, dict[str, Any], dict[str, str]]] = deque()
        self.read_fault: Any = None  # callable(body) -> (status, payload, headers) | None (None: drop the connection)
        self.lock = threading.Lock()
        self._ids = itertools.count(1)
        self.http = LoopbackServer(self.answer)

    @property
    def base_url(self) -> str:
        return f"{self.http.url}/v21.0"

    def start(self) -> FakeWhatsApp:
        self.http.start()
        return self

    def stop(self) -> None:
        self.http.stop()

    def fail(self, code: int, status: int = 400, times: int = 1, message: str = "injected") -> None:
        for _ in range(times):
            self.errors.append((status, {"error": {"message": f"(#{code}) {message}", "type": "OAuthException",
                                                   "code": code, "fbtrace_id": "x"}}, {}))

    def fail_reads(self, code: int, status: int = 400, times: int = 1, message: str = "injected") -> None:
        for _ in range(times):
            self.read_errors.append((status, {"error": {"message": f"(#{code}) {message}", "type": "OAuthException",
                                                        "code": code, "fbtrace_id": "x"}}, {}))

    def answer(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any, dict[str, str]] | None:
        time.sleep(self.delay)
        if body.get("status") == "read":
            return self.answer_read(path, body)
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

    def answer_read(self, path: str, body: dict[str, Any]) -> tuple[int, Any, dict[str, str]] | None:
        with self.lock:
            if self.read_errors:
                return self.read_errors.popleft()
            if self.read_fault is not None:
                return self.read_fault(body)  # type: ignore[no-any-return]
            self.reads.append({"path": path, "body": body})
        return 200, {"success": True}, {}

    def texts_for(self, recipient: str) -> list[str]:
        with self.lock:
            return [s["body"]["text"]["body"] for s in self.sent
                    if (s["body"].get("to") or s["body"].get("recipient")) == recipient]
