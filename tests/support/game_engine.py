"""A loopback game engine serving HTTP tools: it records every call and counts each Idempotency-Key."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from tests.support.loopback import LoopbackPeer, LoopbackServer


class GameEngine(LoopbackPeer):
    """``/look`` answers the player's room; ``/give`` (side-effecting) grants an item; ``/slow`` sleeps;
    ``/tag`` answers with a fact (``"facts"``) beside its result; ``/broken`` answers 500; ``/html`` answers a page that is not JSON; ``/refuse`` answers 404."""

    def __init__(self, *, slow_seconds: float = 3.0) -> None:
        self.calls: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.keys: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.slow_seconds = slow_seconds
        self.http = LoopbackServer(self.answer)

    def answer(self, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any, dict[str, str]]:
        with self.lock:
            self.calls.append((path, headers, body))
            self.keys[headers.get("idempotency-key", "")] += 1
        args = body.get("arguments", {}) if isinstance(body, dict) else {}
        if path == "/look":
            return 200, {"room": "the Rusty Anchor tavern", "player": args.get("player")}, {}
        if path == "/give":
            return 200, {"granted": args.get("item"), "to": args.get("player")}, {}
        if path == "/tag":  # sets a fact beside the result the model reads
            place = args.get("item")
            return 200, {"facts": {"target": f"The player's current target is {place}"}, "tagged": place,
                         "points": 10}, {}
        if path == "/slow":
            time.sleep(self.slow_seconds)
            return 200, {"late": True}, {}
        if path == "/broken":
            return 500, {"error": "engine exploded"}, {}
        if path == "/refuse":
            return 404, {"error": "no such quest"}, {}
        if path == "/html":
            return 200, b"<html>maintenance</html>", {}
        return 404, {"error": f"unknown path {path}"}, {}
