"""The Python examples a game team copies from docs/game.md and docs/producers.md run as written, and print what
their comments say: an answered event in the library, keyed facts, timers with ``cancel_scheduled``.

The client examples talk to Redis through ``ConversationClient.from_env``/``from_url``; here those give a client on
fakeredis whose wake-ups are only noted, so the examples run without a worker and the test can look at what they
queued. A worker applying those inputs is the e2e suites' part (tests/e2e/test_game_turns.py, test_timers.py)."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re
import uuid
from typing import Any

import fakeredis
import pytest

from worker.client import ConversationClient
from worker.envelopes.inputs import decode_envelope
from worker.store.redis_store import ConversationStore

ROOT = pathlib.Path(__file__).resolve().parents[2]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_PRINTED = re.compile(r"^print\(.*\)\s+# (.+)$", re.M)


def _blocks(page: str) -> list[str]:
    return _BLOCK.findall((ROOT / "docs" / page).read_text())


def _block_with(page: str, needle: str) -> str:
    found = [block for block in _blocks(page) if needle in block]
    assert len(found) == 1, f"docs/{page}: expected one Python example with {needle!r}, found {len(found)}"
    return found[0]


def _run(code: str, namespace: dict[str, Any]) -> list[str]:
    """Run ``code``; return its printed lines after checking each against the comment its ``print`` carries."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<docs example>", "exec"), namespace)
    printed = out.getvalue().splitlines()
    assert printed == [comment.strip() for comment in _PRINTED.findall(code)]
    return printed


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> tuple[ConversationClient, list[str]]:
    store = ConversationStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix=f"d{uuid.uuid4().hex[:6]}")
    woken: list[str] = []
    made = ConversationClient(store, woken.append)
    monkeypatch.setattr(ConversationClient, "from_env", classmethod(lambda cls, **_: made))
    monkeypatch.setattr(ConversationClient, "from_url", classmethod(lambda cls, *_, **__: made))
    return made, woken


def test_the_library_answers_an_event_as_the_page_prints() -> None:
    assert _run(_block_with("game.md", "respond_to_event"), {}) == [
        "Well done! (The player has just tagged Harrogate Theatre)"]


def test_the_answered_event_and_the_facts_examples_queue_what_they_say(client) -> None:  # type: ignore[no-untyped-def]
    made, woken = client
    namespace: dict[str, Any] = {}
    _run(_block_with("game.md", "respond=True"), namespace)
    _run(_block_with("game.md", 'key="target"'), namespace)
    cid = "447700900123"
    queued = [decode_envelope(raw) for _, raw in made.store.inbox(cid)]
    assert [(e.kind, e.respond, e.key) for e in queued] == [
        ("event", True, None), ("event", None, "target"), ("event", None, "target"), ("event", None, "score")]
    assert queued[0].message_id == "tag-8812" and woken[:1] == [cid]


def test_the_timers_example_prints_the_one_nudge_left(client) -> None:  # type: ignore[no-untyped-def]
    made, _ = client
    assert _run(_block_with("producers.md", "cancel_scheduled"), {}) == ["['nudge-move-2']"]
    (held,) = made.store.scheduled("447700900123")
    assert decode_envelope(held.envelope).kind == "message"
