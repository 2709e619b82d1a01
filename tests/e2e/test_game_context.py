"""End to end, the live game context: real Celery workers given the tool manifest's ``context`` entry, a loopback
game serving it, a loopback model and loopback WhatsApp. Each turn's model request carries that turn's context in
its system prompt; the stored state never holds it; a game that stops answering in time still gets the player an
answer, with the last good context while it is young enough and without one otherwise."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cluster
from tests.support.game_context import GameContextServer
from tests.support.workers import wait_until
from worker import inspect_state

pytestmark = pytest.mark.e2e

CID, OTHER = "447700900301", "447700900302"


@pytest.fixture()
def game(tmp_path: Path) -> Iterator[tuple[GameContextServer, Path]]:
    g = GameContextServer().start()
    manifest = {"context": {"url": g.endpoint, "timeout": 0.5, "headers": {"Authorization": "Bearer ${GAME_TOKEN}"}}}
    (tmp_path / "tools.json").write_text(json.dumps(manifest))
    yield g, tmp_path / "tools.json"
    g.stop()


def _system_for(cluster: Cluster, text: str) -> str:
    """The system prompt of the model request that answered the player's ``text``."""
    for body in list(cluster.llm.requests):
        messages: list[dict[str, Any]] = body.get("messages", [])
        users = [m for m in messages if m.get("role") == "user"]
        if users and users[-1].get("content") == text:
            return next((str(m["content"]) for m in messages if m.get("role") == "system"), "")
    raise AssertionError(f"no model request answered {text!r}")


def _say(cluster: Cluster, cid: str, text: str, n: int) -> None:
    cluster.client().send_message(cid, text, message_id=f"{cid}-{n}")
    assert wait_until(lambda: len(cluster.whatsapp.texts_for(cid)) >= n, 60), [w.log() for w in cluster.workers]
    assert cluster.whatsapp.texts_for(cid)[n - 1] == f"ack:{text}"


@pytest.mark.parametrize("pool", ["threads", "gevent"])
def test_the_context_is_in_each_turns_system_prompt_and_never_in_the_state(
        cluster: Cluster, game: tuple[GameContextServer, Path], pool: str) -> None:
    server, manifest = game
    cluster.env.update({"PARLEY_TOOLS_FILE": str(manifest), "GAME_TOKEN": "tok",
                        "PARLEY_CONTEXT_MAX_AGE_SECONDS": "60"})
    cluster.start_worker("w1", pool=pool)
    server.answers[CID] = "Player is 120 m from the target."
    _say(cluster, CID, "where is it?", 1)
    server.answers[CID] = "Player is 15 m from the target."
    _say(cluster, CID, "and now?", 2)
    assert _system_for(cluster, "where is it?").endswith("\n\nPlayer is 120 m from the target.")
    second = _system_for(cluster, "and now?")
    assert second.endswith("\n\nPlayer is 15 m from the target.") and "120 m" not in second
    assert server.ids() == [(CID, f"{CID}-1"), (CID, f"{CID}-2")]
    assert all(h["authorization"] == "Bearer tok" for h, _ in server.calls)

    store = cluster.store()
    blob = store.read_state(CID).blob
    view = inspect_state(blob, max_chars=100_000)
    assert view["ok"] and "from the target" not in json.dumps(view) and b"from the target" not in blob

    # The game stops answering in time: the player is answered all the same, with the last good context.
    server.delay = 1.5
    _say(cluster, CID, "hello?", 3)
    assert _system_for(cluster, "hello?").endswith("\n\nPlayer is 15 m from the target.")
    # A conversation with no good context yet goes on without one.
    _say(cluster, OTHER, "anyone?", 1)
    assert "from the target" not in _system_for(cluster, "anyone?")
    assert b"from the target" not in (store.read_state(CID).blob or b"")

    cluster.client().delete(CID)
    assert store.last_context(CID) is None


def test_an_old_last_context_is_not_used(cluster: Cluster, game: tuple[GameContextServer, Path]) -> None:
    server, manifest = game
    cluster.env.update({"PARLEY_TOOLS_FILE": str(manifest), "GAME_TOKEN": "tok",
                        "PARLEY_CONTEXT_MAX_AGE_SECONDS": "1"})
    cluster.start_worker("w1")
    server.answers[CID] = "Player is 120 m from the target."
    _say(cluster, CID, "where is it?", 1)
    time.sleep(1.2)  # the kept context is over a second old now
    server.delay = 1.5  # past the fetch's timeout
    _say(cluster, CID, "hello?", 2)
    assert "from the target" not in _system_for(cluster, "hello?")


def test_a_bad_context_setting_stops_the_worker_at_start(cluster: Cluster) -> None:
    cluster.env["PARLEY_CONTEXT"] = "no_such_game_module:context"
    w = cluster.start_worker("w1")
    assert wait_until(lambda: not w.alive(), 30), w.log()
    assert "PARLEY_CONTEXT=no_such_game_module:context: cannot import 'no_such_game_module'" in w.log()


CALLABLE = '''
import os
from pathlib import Path


def context(conversation_id, input_id):
    """The game's words: a file per conversation the test writes (a slow one when the file says so)."""
    path = Path(os.environ["E2E_CONTEXT_DIR"]) / conversation_id
    text = path.read_text() if path.exists() else None
    if text == "hang":
        import time
        time.sleep(3)
    return f"{text} (input {input_id})" if text else None
'''


@pytest.mark.parametrize("pool", ["threads", "gevent"])
def test_a_python_callable_gives_the_context(cluster: Cluster, tmp_path: Path, pool: str) -> None:
    (tmp_path / "pkgs" / "e2e_game_context").mkdir(parents=True)
    (tmp_path / "pkgs" / "e2e_game_context" / "__init__.py").write_text(CALLABLE)
    texts = tmp_path / "texts"
    texts.mkdir()
    cluster.env.update({"PARLEY_CONTEXT": "e2e_game_context:context", "PARLEY_CONTEXT_TIMEOUT": "0.5",
                        "E2E_CONTEXT_DIR": str(texts),
                        "PYTHONPATH": f"{cluster.env['PYTHONPATH']}:{tmp_path / 'pkgs'}"})
    cluster.start_worker("w1", pool=pool)
    (texts / CID).write_text("Player is 120 m from the target.")
    _say(cluster, CID, "where is it?", 1)
    (texts / CID).write_text("hang")  # past the timeout: the last good context, and an answer all the same
    _say(cluster, CID, "hello?", 2)
    assert _system_for(cluster, "where is it?").endswith(f"\n\nPlayer is 120 m from the target. (input {CID}-1)")
    assert _system_for(cluster, "hello?").endswith(f"\n\nPlayer is 120 m from the target. (input {CID}-1)")
    assert b"from the target" not in (cluster.store().read_state(CID).blob or b"")
