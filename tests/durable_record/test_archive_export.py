"""The archive reaches the durable record: what each commit archived is exported with its record (the
``archived_messages`` table, ``parley db upgrade``'s second migration), a reset with ``forget`` or the reset phrase
erases what was exported before it, a delete erases it all."""

from __future__ import annotations

from typing import Any

from tests.configs import bare_config
from tests.worker.conftest import make_harness
from worker.conversation.scripted import ScriptedModel
from worker.durable_record import database
from worker.durable_record.exporter import Exporter
from worker.store.redis_store import StoreLimits

CID = "447700900566"


def _archived(db: Any, cid: str = CID) -> list[tuple[str, str]]:
    rows = db.execute("SELECT speaker, text FROM archived_messages a JOIN records r USING (record_id)"
                      " WHERE a.conversation_id = %s ORDER BY r.stream_ms, r.stream_seq, a.seq", (cid,)).fetchall()
    db.rollback()
    return [(r[0], r[1]) for r in rows]


def test_archived_messages_are_exported_and_erased(db: Any, database_url: str) -> None:
    config = bare_config(system_prompt="You are a test.", record=True, model_name="scripted-1")
    h = make_harness(ScriptedModel(default=lambda req: "ack:" + req.messages[-1].content), config=config,
                     limits=StoreLimits(record_max=10_000), reset_phrases=("start over",))
    exporter = Exporter(h.store, lambda: database.connect(database_url), batch=500)
    h.client.send_message(CID, "the key is under the mat", message_id="m1")
    h.run()
    h.client.reset(CID)
    h.run()
    exporter.export_once()
    assert _archived(db) == [("player", "the key is under the mat"), ("assistant", "ack:the key is under the mat")]
    body = db.execute("SELECT body::text FROM records WHERE kind = 'reset'").fetchone()[0]
    db.rollback()
    assert "under the mat" not in body  # the archived texts are rows, not repeated in the record's body
    h.client.send_message(CID, "second life", message_id="m2")
    h.run()
    h.client.reset(CID, forget=True)
    h.client.send_message(CID, "third life", message_id="m3")
    h.run()
    h.client.reset(CID)
    h.run()
    exporter.export_once()  # the erase and what was archived after it, in one batch
    assert _archived(db) == [("player", "third life"), ("assistant", "ack:third life")]
    h.client.send_message(CID, "start over", message_id="m4")
    h.run()
    exporter.export_once()
    assert _archived(db) == []
    h.client.send_message(CID, "fourth", message_id="m5")
    h.run()
    h.client.reset(CID)
    h.run()
    exporter.export_once()
    assert _archived(db) and h.client.delete(CID) is None
    exporter.export_once()
    assert _archived(db) == []
    exporter.close()
