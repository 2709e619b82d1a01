"""The durable record of a person taking over, in the real PostgreSQL: the inputs a pause withheld are there
(``withheld`` records, no reply), and a person's message is its own ``operator`` record, which ``parley transcript``
shows as ``operator``, not as the model's."""

from __future__ import annotations

from typing import Any

import pytest

from tests.durable_record.test_exporter import CID, _exporter, _harness
from worker import cli
from worker.cli import record as commands
from worker.durable_record import database


def test_withheld_inputs_and_a_persons_words_in_the_transcript(db: Any, database_url: str,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    h = _harness()
    h.client.send_message(CID, "hi", message_id="m1")
    h.run()
    h.client.pause(CID)
    h.client.send_message(CID, "help", message_id="m2")
    h.client.send_operator_message(CID, "Sam here.", message_id="op1")
    h.run()  # while paused (a pause and a resume take effect at once, not in the conversation's order)
    h.client.resume(CID)
    h.client.send_message(CID, "thanks", message_id="m3")
    h.run()
    _exporter(h, database_url).export_once()
    lines = database.transcript(db, CID)
    assert [(ln.role, ln.text) for ln in lines] == [
        ("player", "hi"), ("assistant", "ack:hi"), ("player", "help"), ("operator", "Sam here."),
        ("player", "thanks"), ("assistant", "ack:thanks")]
    kinds = [k for (k,) in db.execute("SELECT kind FROM records WHERE conversation_id = %s AND kind NOT IN "
                                      "('sent', 'status') ORDER BY stream_ms, stream_seq", (CID,)).fetchall()]
    assert kinds == ["turn", "withheld", "operator", "turn"]
    monkeypatch.setattr(commands, "_conn", lambda: database.connect(database_url))
    assert cli.main(["transcript", CID]) == 0
    assert "  operator   Sam here." in capsys.readouterr().out
