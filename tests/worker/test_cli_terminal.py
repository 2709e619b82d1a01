"""``parley show``, ``trace`` and ``dead`` print what a player sent and what the model answered with every control
escaped (worker.cli.terminal): a player cannot clear, retitle or rewrite the operator's terminal through them."""

from __future__ import annotations

import json

import pytest

from tests.test_terminal import HOSTILE, unsafe
from tests.worker.conftest import Harness, make_harness
from worker import cli
from worker.errors import ModelRequestError

CID = "447700900123"


@pytest.fixture
def h(monkeypatch: pytest.MonkeyPatch) -> Harness:
    harness = make_harness()
    harness.client.send_message(CID, HOSTILE, message_id="m1")
    harness.run()
    assert [t for _, t, _ in harness.channel.sent] == ["ack:" + HOSTILE]  # the reply carries the player's text
    monkeypatch.setattr(cli, "_store", lambda: harness.store)
    return harness


def test_show_escapes_the_replies_and_the_state(h: Harness, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["show", CID]) == 0
    out = capsys.readouterr().out
    assert unsafe(out) == []
    view = json.loads(out)
    assert view["last_replies"][-1]["reply"] == "ack:" + HOSTILE  # lossless: escaped, not dropped
    assert [m["content"] for m in view["state"]["history"]] == [HOSTILE, "ack:" + HOSTILE]


def test_trace_escapes_the_replies(h: Harness, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["trace", CID]) == 0
    out = capsys.readouterr().out
    assert unsafe(out) == []
    assert "\\u202eevil" in out and "ack:hi\\u001b[2J" in out


def test_dead_escapes_the_id_and_the_detail(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    harness = make_harness()
    harness.model.push(ModelRequestError(f"bad request: {HOSTILE}"))
    harness.client.send_message(CID, "please", message_id="wamid.\x1b[2J\u202e1")
    harness.run()
    monkeypatch.setattr(cli, "_store", lambda: harness.store)
    assert cli.main(["dead", CID]) == 0
    out = capsys.readouterr().out
    assert unsafe(out) == []
    assert "wamid.\\x1b[2J\\u202e1" in out and "fake line\\u202eevil" in out
    assert "\n    second line" in out  # a newline of the detail stays readable, indented under its entry
    assert cli.main(["replay", CID, "0"]) == 0
    out = capsys.readouterr().out
    assert unsafe(out) == [] and "wamid.\\x1b[2J\\u202e1" in out
