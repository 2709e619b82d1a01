"""A loopback game serving the live context endpoint: ``POST /context`` with ``{"conversation_id", "input_id"}``
answers ``{"system": ...}`` from what the test set for that conversation; it records every call."""

from __future__ import annotations

import threading
import time
from typing import Any

from tests.support.loopback import LoopbackPeer, LoopbackServer


class GameContextServer(LoopbackPeer):
    """``answers[cid]``: what ``/context`` answers for that conversation: a text (as ``{"system": text}``), or a
    ``(status, payload)`` pair as it is. ``delay``: seconds to wait before answering (a timeout, when over the
    fetch's). Other conversations get ``{"system": default}`` (null unless set)."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.answers: dict[str, str | tuple[int, Any]] = {}
        self.delay = 0.0
        self.default: str | None = None
        self.lock = threading.Lock()
        self.http = LoopbackServer(self.answer)

    @property
    def endpoint(self) -> str:
        return f"{self.url}/context"

    def answer(self, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any, dict[str, str]]:
        with self.lock:
            self.calls.append((headers, body))
            delay = self.delay
            given = self.answers.get(body.get("conversation_id", "") if isinstance(body, dict) else "", self.default)
        if delay:
            time.sleep(delay)
        if path != "/context":
            return 404, {"error": f"unknown path {path}"}, {}
        if isinstance(given, tuple):
            return given[0], given[1], {}
        return 200, {"system": given}, {}

    def ids(self) -> list[tuple[str, str]]:
        """The (conversation id, input id) of every call so far, in order."""
        with self.lock:
            return [(b["conversation_id"], b["input_id"]) for _, b in self.calls]
