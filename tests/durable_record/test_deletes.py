"""Privacy: a delete reaches PostgreSQL whichever process issues it, and no worker's cache brings the conversation
back. Real redis-server, real PostgreSQL, the real ``parley`` command where the deployment runs it."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.configs import bare_config
from tests.support.redis_server import RedisServer, start_redis
from tests.worker.conftest import Harness, make_harness
from worker.client import ConversationClient
from worker.durable_record import database
from worker.durable_record.exporter import Exporter
from worker.store.redis_store import ConversationStore, StoreLimits

CID = "447700900777"
ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = start_redis()
    yield server
    server.stop()


def _worker(server: RedisServer) -> Harness:
    """A worker of a deployment with the record on (PARLEY_DATABASE_URL set on the workers)."""
    config = bare_config(system_prompt="You are a test.", record=True, model_name="scripted-1")
    return make_harness(config=config, limits=StoreLimits(record_max=10_000), redis_client=server.client())


def _elsewhere(h: Harness) -> ConversationClient:
    """A game engine or the webhook: the same Redis, no PARLEY_DATABASE_URL of its own."""
    store = ConversationStore(h.store._client, prefix=h.store.prefix, limits=StoreLimits())
    return ConversationClient(store, lambda cid: h.woken.append(("drain", cid)))


def test_a_delete_from_a_process_without_a_database_erases_the_transcript(
        redis_server: RedisServer, db: Any, database_url: str) -> None:
    h = _worker(redis_server)
    h.client.send_message(CID, "my home address is 1 Secret Lane", message_id="m1")
    h.run()
    exporter = Exporter(h.store, lambda: database.connect(database_url))
    exporter.export_once()  # the exporter says in Redis that the deployment keeps a record
    assert database.transcript(db, CID)[0].text.startswith("my home address")
    _elsewhere(h).delete(CID)
    exporter.export_once()
    assert database.transcript(db, CID) == []
    assert db.execute("SELECT count(*) FROM records WHERE body::text LIKE '%Secret Lane%'").fetchone()[0] == 0
    exporter.close()


def test_before_any_exporter_or_upgrade_ran_a_delete_records_nothing(redis_server: RedisServer) -> None:
    h = _worker(redis_server)
    h.client.send_message(CID, "hello", message_id="m1")
    h.run()
    before = h.store.record_backlog().entries
    _elsewhere(h).delete(CID)
    assert h.store.record_backlog().entries == before  # the record is off as far as Redis knows


def test_parley_db_upgrade_marks_the_record_on_for_every_process(redis_server: RedisServer, database_url: str,
                                                                  tmp_path: pathlib.Path) -> None:
    prefix = f"u{uuid.uuid4().hex[:6]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    env.update(REDIS_URL=redis_server.url, PARLEY_DATABASE_URL=database_url, PARLEY_KEY_PREFIX=prefix,
               PARLEY_RECORD_STREAM_MAX="777")
    done = subprocess.run([sys.executable, "-m", "worker.cli", "db", "upgrade"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    producer = ConversationStore(redis_server.client(), prefix=prefix)  # no record of its own
    assert producer.deployment_record_cap() == 777


def test_a_worker_that_kept_the_state_decoded_starts_fresh_after_a_delete_elsewhere(
        redis_server: RedisServer) -> None:
    h = _worker(redis_server)
    h.client.send_message(CID, "remember: my secret is 42", message_id="m1")
    h.run()
    assert len(h.service.residents) == 1  # this worker holds the conversation decoded
    _elsewhere(h).delete(CID)
    h.client.send_message(CID, "what is my secret?", message_id="m2")
    h.run()
    seen = [m.content for m in h.model.requests[-1].messages if m.role != "system"]
    assert seen == ["what is my secret?"]
    assert h.channel.sent[-1][1] == "ack:what is my secret?"


def test_a_compaction_computed_before_a_delete_does_not_bring_the_conversation_back(
        redis_server: RedisServer) -> None:
    from worker.conversation.compaction import Summarize
    from worker.conversation.scripted import ScriptedModel

    holder: list[Harness] = []

    def summarise(req: Any) -> str:
        _elsewhere(holder[0]).delete(CID)  # the delete lands while the summariser runs
        return "SUMMARY: the player's secret is 42"

    config = bare_config(system_prompt="You are a test.", record=True, model_name="scripted-1")
    h = make_harness(config=config, limits=StoreLimits(record_max=10_000), redis_client=redis_server.client(),
                     compactor=Summarize(ScriptedModel(default=summarise), keep_last=1, batch=1))
    holder.append(h)
    for i in range(3):
        h.client.send_message(CID, f"secret part {i}", message_id=f"m{i}")
    h.run(defer=("compact",))
    assert h.service.queue_compaction(CID)  # its splice is queued after the delete
    h.client.send_message(CID, "hello again", message_id="m9")
    h.run(defer=("compact",))
    last = h.model.requests[-1]
    assert [m.content for m in last.messages if m.role != "system"] == ["hello again"]
    assert "secret" not in (last.system or "")


def test_a_delete_whose_record_the_stream_cap_dropped_still_erases_the_transcript(
        redis_server: RedisServer, db: Any, database_url: str) -> None:
    config = bare_config(system_prompt="You are a test.", record=True, model_name="scripted-1")
    h = make_harness(config=config, limits=StoreLimits(record_max=3), redis_client=redis_server.client())
    h.client.send_message(CID, "my secret", message_id="m1")
    h.run()
    exporter = Exporter(h.store, lambda: database.connect(database_url))
    exporter.export_once()
    assert database.transcript(db, CID) != []
    # The exporter is down: the delete's record and what follows overflow the cap of 3 entries.
    _elsewhere(h).delete(CID)
    for i in range(2):
        h.client.send_message("447700900111", f"busy {i}", message_id=f"b{i}")
    h.run()
    assert int(h.store._client.get(h.store.records.dropped(CID)) or 0) >= 1
    assert all(e.record_id.split(":")[0] != "d" for e in h.store.read_records(h.store.records.stream(CID), 10))
    exporter.export_once()
    assert database.transcript(db, CID) == []
    assert h.store.pending_deletes() == []
    exporter.close()
