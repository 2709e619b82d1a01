"""A game's Python tool package, as a team would ship it, for the worker's ``PARLEY_TOOLS`` (tests only).

``give_item`` is side-effecting: it POSTs to the loopback game engine at ``PARLEY_TEST_GAME_URL``. Its identity is
the ``nonce`` the model wrote in the arguments (the loopback model draws a fresh one, and a fresh call id, on every
model call, as a real model's ids differ on every call): a retried turn that asked the model again would send a
new identity, one that replays its journal sends the same one.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

from worker.conversation.tools import Tool

_PARAMS = {"type": "object", "properties": {"item": {"type": "string"}, "nonce": {"type": "string"}},
           "required": ["item", "nonce"]}


def _give_item(item: str, nonce: str) -> Any:
    r = httpx.post(os.environ["PARLEY_TEST_GAME_URL"] + "/give", json={"item": item, "nonce": nonce}, timeout=10,
                   headers={"X-Worker-Pid": str(os.getpid())})  # so the test kills the worker that made the call
    r.raise_for_status()
    return r.json()


def tools(settings: Any) -> list[Tool]:
    """The factory form: called with the worker's settings."""
    return [Tool("give_item", "Give the player an item in the game.", _PARAMS, _give_item, timeout=15)]


TOOLS = [Tool("look", "Look around.", {"type": "object", "properties": {}}, lambda: "a quiet room")]
NOT_TOOLS = ["look"]
