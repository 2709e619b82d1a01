"""The manifest's ``idempotent`` key: a worker that dies inside an HTTP tool call (the request reached the game
engine, its result was never recorded) retries the turn; a tool declared idempotent is called again with the same
Idempotency-Key, one that is not (the default) is not called again and the model reads that its outcome is
unknown. A real loopback game engine, the worker's own turn journal."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.game_engine import GameEngine
from tests.worker.conftest import Harness, make_harness
from worker.conversation.loop import UNKNOWN_OUTCOME
from worker.conversation.model import ModelRequest
from worker.conversation.scripted import Reply, ScriptedModel
from worker.settings import Settings
from worker.tools import fixed_tools

CID = "447700900999"
GIVE = {"type": "object", "properties": {"item": {"type": "string"}}}


class Killed(BaseException):
    """The worker process dies (nothing catches it, as nothing survives SIGKILL)."""


@pytest.fixture()
def engine() -> Iterator[GameEngine]:
    e = GameEngine().start()
    yield e
    e.stop()


def _worker(tmp_path: Path, engine: GameEngine, **entry: Any) -> Harness:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps({"tools": [{"name": "give", "description": "Give the player an item.",
                                           "parameters": GIVE, "url": f"{engine.url}/give", **entry}]}))
    tools, _ = fixed_tools(Settings(tools_file=str(path)))

    def answer(req: ModelRequest) -> str:
        return "final: " + req.messages[-1].content

    model = ScriptedModel([Reply(tool_calls=(("give", {"item": "sword"}),))], default=answer)
    return make_harness(model, tools=tools)


def _die_before_the_result_is_recorded(h: Harness, engine: GameEngine) -> None:
    real = h.store.record_step

    def record_step(cid: str, token: int, input_id: str, **kw: Any) -> bool:
        if kw.get("call_id") is not None:
            h.store.record_step = real  # type: ignore[method-assign]
            raise Killed
        return real(cid, token, input_id, **kw)

    h.store.record_step = record_step  # type: ignore[method-assign]
    h.client.send_message(CID, "give me a sword", message_id="m1")
    with pytest.raises(Killed):
        h.service.drain(CID)
    assert [p for p, _, _ in engine.calls] == ["/give"]  # the request reached the engine


def test_a_tool_that_is_not_idempotent_is_not_called_again_after_a_crash_inside_the_call(
        tmp_path: Path, engine: GameEngine) -> None:
    h = _worker(tmp_path, engine)  # "idempotent" left out: false
    _die_before_the_result_is_recorded(h, engine)
    h.service.drain(CID)  # the retry replays the recorded round
    assert len(engine.calls) == 1
    assert h.channel.sent[-1][1] == "final: " + UNKNOWN_OUTCOME.format(name="give")


def test_an_idempotent_tool_is_called_again_with_the_same_key(tmp_path: Path, engine: GameEngine) -> None:
    h = _worker(tmp_path, engine, idempotent=True)
    _die_before_the_result_is_recorded(h, engine)
    h.service.drain(CID)
    assert len(engine.calls) == 2 and len(engine.keys) == 1  # the engine can tell it is the same call
    assert h.channel.sent[-1][1] == 'final: {"granted": "sword", "to": null}'
