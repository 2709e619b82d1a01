"""The exporter as a Celery beat entry: the app schedules parley.export_records only when asked to and a database is
set, and the task exports until the streams are empty."""

from __future__ import annotations

import uuid

import pytest
import redis

from worker.settings import Settings


def test_the_beat_entry_is_there_only_when_asked_for() -> None:
    from tasks.app import make_app

    assert not make_app(Settings(export_every_seconds=5)).conf.beat_schedule  # no database: nothing to export
    app = make_app(Settings(export_every_seconds=5, database_url="postgresql://db/parley"))
    entry = app.conf.beat_schedule["parley-export-records"]
    assert (entry["task"], entry["schedule"]) == ("parley.export_records", 5)
    assert "tasks.export" in app.conf.include


def test_the_task_exports_until_the_streams_are_empty(database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import tasks.export as task_module
    from worker.durable_record import database
    from worker.durable_record.entries import InputRecord, applied
    from worker.queue.connections import build_store

    conn = database.connect(database_url)
    database.upgrade(conn)
    settings = Settings(redis_url="redis://127.0.0.1:6379/0", key_prefix=f"t{uuid.uuid4().hex[:8]}",
                        database_url=database_url, exporter_batch=3)
    try:
        redis.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=0.5).ping()
    except redis.RedisError:
        from tests.support.redis_server import skip_or_fail

        skip_or_fail("no redis-server at 127.0.0.1:6379")
    store = build_store(settings)
    stream = store.records.stream("447700900001")
    for i in range(7):
        store._client.xadd(stream, {"id": f"t:{i}", "r": applied("event", "447700900001",
                                                             inputs=[InputRecord(f"e{i}", "event", f"event {i}")])})
    monkeypatch.setattr(task_module, "get_settings", lambda: settings)
    monkeypatch.setattr(task_module, "_exporter", None)
    try:
        assert task_module.export_records() == 7
        assert [ln.text for ln in database.transcript(conn, "447700900001")] == [f"event {i}" for i in range(7)]
        assert task_module.export_records() == 0
    finally:
        store._client.delete(stream)
        conn.close()
