"""The durable record end to end inside one process: the service commits turns (their entries ride in the commit),
the exporter moves them to the real PostgreSQL, idempotently, and trims the stream only after the rows are
committed; deletes reach the database; a player over the daily token budget gets the configured answer."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tests.configs import bare_config
from tests.worker.conftest import Harness, make_harness
from worker.conversation.scripted import Reply, ScriptedModel
from worker.conversation.tools import Tool
from worker.durable_record import database, entries
from worker.durable_record.exporter import Exporter
from worker.errors import DatabaseUnavailableError
from worker.store.redis_store import StoreLimits

CID = "447700900555"
RECORD = StoreLimits(record_max=10_000)


def _harness(model: ScriptedModel | None = None, *, budget: int = 0, **kw: Any) -> Harness:
    config = bare_config(system_prompt="You are a test.", record=True, model_name="scripted-1",
                           daily_token_budget=budget, token_budget_reply="That's enough for today!")
    return make_harness(model, config=config, limits=RECORD, **kw)


def _exporter(h: Harness, url: str, batch: int = 500) -> Exporter:
    return Exporter(h.store, lambda: database.connect(url), batch=batch)


def _count(db: Any, table: str) -> int:
    n = int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    db.rollback()
    return n


def test_a_turn_with_a_tool_call_reaches_the_database_whole(db: Any, database_url: str) -> None:
    def visit(place: str) -> dict[str, str]:
        return {"visited": place}

    tool = Tool("visit", "Visit a place.", {"type": "object", "properties": {"place": {"type": "string"}}}, visit)
    model = ScriptedModel([Reply(tool_calls=(("visit", {"place": "Harrogate Theatre"}),)),
                           Reply("You are at the theatre. " * 300)], default=None)
    h = _harness(model, tools=[tool])
    h.client.send_event(CID, "User tagged Harrogate Theatre", message_id="e1")
    h.client.send_message(CID, "where am I?", message_id="m1")
    h.run()
    sent = h.channel.sent
    assert len(sent) == 2  # a long reply goes in two parts
    h.store.record_status(CID, "rec-1", "read", record=entries.status(CID, provider_id="rec-1", status="read", detail="",
                                                                      reply_id=None, part=0))
    exporter = _exporter(h, database_url)
    done = exporter.export_once()
    assert done.exported == 4 and done.unreadable == 0  # event, turn, sent reply, status
    assert h.store.record_backlog().entries == 0  # trimmed after the commit
    lines = database.transcript(db, CID)
    assert [ln.role for ln in lines] == ["event", "player", "tool", "assistant", "assistant"]
    assert lines[0].text == "User tagged Harrogate Theatre" and lines[1].text == "where am I?"
    tool_line = lines[2]
    assert (tool_line.tool, tool_line.tool_arguments) == ("visit", '{"place": "Harrogate Theatre"}')
    assert tool_line.tool_result == '{"visited": "Harrogate Theatre"}' and tool_line.tool_ms is not None
    assert [ln.text for ln in lines[3:]] == [t for _, t, _ in sent]
    assert [ln.status for ln in lines[3:]] == ["read", "sent"]
    [u] = database.usage(db, dt.date.today() - dt.timedelta(days=1))
    requests = model.requests
    assert u.conversation_id == CID and u.turns == 1 and len(requests) == 2
    assert u.prompt_tokens > 0 and u.completion_tokens > 0  # both rounds counted
    assert u.total == h.store.tokens_today(CID)
    model_name = db.execute("SELECT model FROM usage").fetchone()[0]
    assert model_name == "scripted-1"
    exporter.close()


def test_a_replayed_batch_changes_nothing(db: Any, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    h = _harness()
    for i in range(5):
        h.client.send_message(CID, f"line {i}", message_id=f"m{i}")
    h.run()
    exporter = _exporter(h, database_url)

    def crash(*_: Any) -> int:
        raise SystemExit("killed between the database commit and the trim")

    with monkeypatch.context() as m:
        m.setattr(h.store, "ack_records", crash)
        with pytest.raises(SystemExit):
            exporter.export_once()
    before = {t: _count(db, t) for t in ("records", "messages", "usage", "conversations")}
    assert before["records"] == 10 and before["usage"] == 5  # 5 turns + 5 sent replies
    assert h.store.record_backlog().entries == 10  # not trimmed: the entries are still there
    assert exporter.export_once().exported == 10  # written again ...
    assert {t: _count(db, t) for t in before} == before  # ... and nothing changed
    assert h.store.record_backlog().entries == 0
    assert [ln.text for ln in database.transcript(db, CID) if ln.role == "player"] == [f"line {i}" for i in range(5)]
    exporter.close()


def test_batches_smaller_than_the_stream_keep_the_order(db: Any, database_url: str) -> None:
    h = _harness()
    for i in range(7):
        h.client.send_message(CID, f"line {i}", message_id=f"m{i}")
        h.run()
    exporter = _exporter(h, database_url, batch=3)
    while exporter.export_once().exported:
        pass
    lines = database.transcript(db, CID)
    assert [ln.text for ln in lines] == [x for i in range(7) for x in (f"line {i}", f"ack:line {i}")]
    exporter.close()


def test_an_unreachable_database_leaves_the_stream_as_it_was(database_url: str) -> None:
    h = _harness()
    h.client.send_message(CID, "hello", message_id="m1")
    h.run()
    exporter = Exporter(h.store, lambda: database.connect("postgresql://127.0.0.1:1/nothing"))
    with pytest.raises(DatabaseUnavailableError):
        exporter.export_once()
    assert h.store.record_backlog().entries == 2


def test_a_delete_erases_the_conversation_but_not_its_next_life(db: Any, database_url: str) -> None:
    h = _harness()
    other = "447700900556"
    h.client.send_message(CID, "my secret", message_id="m1")
    h.client.send_message(other, "someone else", message_id="o1")
    h.run()
    exporter = _exporter(h, database_url)
    exporter.export_once()  # the first life is in the database already ...
    h.client.send_message(CID, "more secrets", message_id="m2")
    h.run()
    h.client.delete(CID)  # ... a producer deletes it (no database access of its own) ...
    h.client.send_message(CID, "a new start", message_id="m3")  # ... and the player comes back
    h.run()
    exporter.export_once()
    assert [ln.text for ln in database.transcript(db, CID)] == ["a new start", "ack:a new start"]
    assert [ln.text for ln in database.transcript(db, other)] == ["someone else", "ack:someone else"]
    secrets = db.execute("SELECT count(*) FROM records WHERE body::text LIKE '%secret%'").fetchone()[0]
    assert secrets == 0
    # The operator's delete erases at once as well (`parley delete` with PARLEY_DATABASE_URL set).
    with db.transaction():
        assert database.erase(db, CID) == 2
    assert database.transcript(db, CID) == []
    assert _count(db, "conversations") == 1
    exporter.close()


def test_an_entry_that_does_not_decode_is_kept_raw(db: Any, database_url: str) -> None:
    h = _harness()
    h.client.send_message(CID, "hello", message_id="m1")
    h.run()
    [stream] = h.store.record_streams()
    h.store._client.xadd(stream, {"id": "bad:1", "r": b"\xc1 not msgpack"})
    assert _exporter(h, database_url).export_once().unreadable == 1
    kind, cid, body = db.execute("SELECT kind, conversation_id, body FROM records WHERE record_id = 'bad:1'").fetchone()
    assert (kind, cid) == ("unreadable", "") and body["raw"]
    assert [ln.text for ln in database.transcript(db, CID)] == ["hello", "ack:hello"]


def test_over_the_daily_budget_the_player_gets_the_configured_answer_and_the_model_is_not_called(
        db: Any, database_url: str) -> None:
    from worker.conversation.model import Usage

    model = ScriptedModel([Reply("first answer", usage=Usage(prompt_tokens=90, completion_tokens=20))],
                          default=lambda req: "should not be called")
    h = _harness(model, budget=100)
    h.client.send_message(CID, "hi", message_id="m1")
    h.run()
    assert h.store.tokens_today(CID) == 110
    h.client.send_message(CID, "one more", message_id="m2")
    h.client.send_message(CID, "and another", message_id="m3")
    h.run()
    assert len(model.requests) == 1
    assert [t for _, t, _ in h.channel.sent] == ["first answer", "That's enough for today!",
                                                 "That's enough for today!"]
    _exporter(h, database_url).export_once()
    kinds = [r[0] for r in db.execute("SELECT kind FROM records WHERE kind IN ('turn', 'notice') "
                                      "ORDER BY stream_ms, stream_seq")]
    assert kinds == ["turn", "notice", "notice"]
    why = db.execute("SELECT body->>'why' FROM records WHERE kind = 'notice' LIMIT 1").fetchone()[0]
    assert why == "budget"
    [u] = database.usage(db, dt.date.today() - dt.timedelta(days=1), CID)
    assert (u.turns, u.total) == (1, 110)


def test_without_a_database_nothing_is_recorded() -> None:
    h = make_harness()
    h.client.send_message(CID, "hello", message_id="m1")
    h.run()
    assert h.store.record_streams() == [h.store.records.stream(CID)]
    assert h.store.record_backlog().entries == 0


def test_the_dropped_gauge_keeps_counting_a_stream_the_exporter_emptied(db: Any, database_url: str) -> None:
    from worker import metrics
    from worker.store.keys import RecordKeys

    h = make_harness(config=bare_config(system_prompt="You are a test.", record=True), limits=StoreLimits(record_max=3))
    h.store.records = RecordKeys(h.store.prefix, clustered=True)  # one stream per slot: an empty one is not looked at
    for i in range(5):
        h.client.send_message(CID, f"line {i}", message_id=f"m{i}")
    h.run()  # 5 turns + 5 sent replies into a stream capped at 3
    exporter = _exporter(h, database_url)
    assert exporter.export_once().exported == 3
    assert metrics.RECORD_DROPPED._value.get() == 7
    assert exporter.export_once().streams == 0  # emptied: no stream holds entries now ...
    assert metrics.RECORD_DROPPED._value.get() == 7  # ... and what its cap dropped is still counted
    assert metrics.RECORD_BACKLOG._value.get() == 0
    exporter.close()
