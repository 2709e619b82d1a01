"""``parley transcript`` against the real PostgreSQL: what the player, the model and a tool wrote is printed with
every control escaped and later lines indented under the text column, so no message can rewrite the operator's
terminal or pass one of its lines off as a line of the transcript (worker.cli.terminal)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.durable_record.test_exporter import CID, _exporter, _harness
from tests.test_terminal import HOSTILE, unsafe
from worker import cli
from worker.cli import record as commands
from worker.conversation.scripted import Reply, ScriptedModel
from worker.conversation.tools import Tool
from worker.durable_record import database

COLUMN = " " * 32  # "2026-01-01 00:00:00  assistant  "


@pytest.fixture
def recorded(db: Any, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = Tool("visit", "Visit a place.", {"type": "object", "properties": {"place": {"type": "string"}}},
                lambda place: {"visited": HOSTILE})
    model = ScriptedModel([Reply(tool_calls=(("visit", {"place": HOSTILE}),)), Reply(f"Model says {HOSTILE}")],
                          default=None)
    h = _harness(model, tools=[tool])
    h.client.send_message(CID, HOSTILE, message_id="m1")
    h.run()
    _exporter(h, database_url).export_once()
    assert [ln.role for ln in database.transcript(db, CID)] == ["player", "tool", "assistant"]
    monkeypatch.setattr(commands, "_conn", lambda: database.connect(database_url))


def test_the_transcript_escapes_players_models_and_tools(recorded: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["transcript", CID]) == 0
    out = capsys.readouterr().out
    assert unsafe(out) == []
    lines = out.splitlines()
    escaped = "hi\\x1b[2J\\x1b]0;owned\\x07\\rfake line\\u202eevil\\u2066\\x9b31m\\x85\\x7f\\tdone"
    assert lines[0].endswith(f"  player     {escaped}") and lines[1] == f"{COLUMN}second line"
    assert "  tool       visit(" in lines[2] and "fake line\\u202eevil\\u2066\\x9b31m" in lines[2]
    assert lines[-2].endswith(f"  assistant  Model says {escaped}") and lines[-1].startswith(f"{COLUMN}second line")
    # Every line of the output is either a transcript line (it starts with the time) or indented under its text.
    assert all(ln[:2] == "20" or ln.startswith(COLUMN) for ln in lines)


def test_the_json_transcript_stays_valid_and_lossless(recorded: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["transcript", CID, "--json"]) == 0
    out = capsys.readouterr().out
    assert unsafe(out) == []
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows[0]["text"] == HOSTILE and rows[-1]["text"] == f"Model says {HOSTILE}"
