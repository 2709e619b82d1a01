"""The summariser's tokens are the player's too: the compaction follow-up task's model usage counts in the daily
token budget (Redis) and in `parley usage` (PostgreSQL), next to the turns'."""

from __future__ import annotations

import datetime as dt
from typing import Any

from tests.configs import bare_config
from tests.worker.conftest import make_harness
from worker.conversation.compaction import Summarize
from worker.conversation.model import Usage
from worker.conversation.scripted import Reply, ScriptedModel
from worker.durable_record import database
from worker.durable_record.exporter import Exporter
from worker.store.redis_store import StoreLimits

CID = "447700900888"
TURN = Usage(prompt_tokens=100, completion_tokens=10)
SUMMARY = Usage(prompt_tokens=400, completion_tokens=50)
TURN_TOKENS, SUMMARY_TOKENS = 100 + 10, 400 + 50  # what the daily budget counts: prompt and completion


def test_a_compaction_s_tokens_count_in_the_budget_and_in_usage(db: Any, database_url: str) -> None:
    summarizer = ScriptedModel(default=lambda req: Reply("the summary", usage=SUMMARY))
    model = ScriptedModel(default=lambda req: Reply("ack", usage=TURN))
    config = bare_config(system_prompt="You are a test.", record=True, model_name="scripted-1",
                           daily_token_budget=1_000_000)
    h = make_harness(model, compactor=Summarize(summarizer, keep_last=1, batch=1), config=config,
                     limits=StoreLimits(record_max=10_000))
    for i in range(3):
        h.client.send_message(CID, f"q{i}", message_id=f"m{i}")
    h.run(defer=("compact",))
    assert h.store.tokens_today(CID) == 3 * TURN_TOKENS
    assert h.service.queue_compaction(CID)
    h.run(defer=("compact",))
    assert len(summarizer.requests) == 1
    assert h.store.tokens_today(CID) == 3 * TURN_TOKENS + SUMMARY_TOKENS
    Exporter(h.store, lambda: database.connect(database_url)).export_once()
    [row] = database.usage(db, dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1), CID)
    assert (row.turns, row.prompt_tokens, row.completion_tokens) == (3, 3 * 100 + 400, 3 * 10 + 50)


def test_an_answered_event_is_recorded_apart_from_the_players_turns(db: Any, database_url: str) -> None:
    model = ScriptedModel(default=lambda req: Reply("ack", usage=TURN))
    config = bare_config(system_prompt="You are a test.", record=True, model_name="scripted-1")
    h = make_harness(model, config=config, limits=StoreLimits(record_max=10_000))
    cid = "447700900889"
    h.client.send_message(cid, "hi", message_id="m0")
    h.client.send_event(cid, "The player has just tagged Harrogate Theatre", message_id="e1", respond=True)
    h.run()
    Exporter(h.store, lambda: database.connect(database_url)).export_once()
    kinds = [k for (k,) in db.execute("SELECT kind FROM records WHERE conversation_id = %s"
                                      " AND kind LIKE %s ORDER BY stream_ms, stream_seq", (cid, "%turn")).fetchall()]
    assert kinds == ["turn", "event_turn"]
    [row] = database.usage(db, dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1), cid)
    assert (row.turns, row.prompt_tokens) == (1, 2 * 100)  # one player's turn; both turns' tokens
    texts = [(m.role, m.text) for m in database.transcript(db, cid)]
    assert ("event", "The player has just tagged Harrogate Theatre") in texts and texts[-1] == ("assistant", "ack")
