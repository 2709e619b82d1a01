"""The record's schema on the real PostgreSQL: `parley db upgrade` creates it once, under a lock, and refuses a
database newer than this Parley."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from worker.durable_record import database
from worker.durable_record.migrations import migrations
from worker.errors import RecordError


def test_upgrade_creates_the_tables_and_indexes_once(database_url: str) -> None:
    conn = database.connect(database_url)
    with pytest.raises(RecordError, match="parley db upgrade"):
        database.require_schema(conn)
    assert database.upgrade(conn) == [f"{m.version:04d}_{m.name}" for m in migrations()]
    assert database.upgrade(conn) == []
    database.require_schema(conn)
    tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert {"parley_schema", "conversations", "records", "messages", "usage"} <= tables
    indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")}
    assert {"records_conversation_position", "messages_conversation_at", "usage_day_conversation"} <= indexes
    conn.close()


def test_two_upgrades_at_once_apply_each_migration_once(database_url: str) -> None:
    results: list[Any] = []

    def up() -> None:
        c = database.connect(database_url)
        try:
            results.append(database.upgrade(c))
        except Exception as exc:
            results.append(exc)
        finally:
            c.close()

    threads = [threading.Thread(target=up) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(len(r) for r in results) == [0, 0, len(migrations())], results


def test_a_newer_schema_is_refused(database_url: str) -> None:
    conn = database.connect(database_url)
    database.upgrade(conn)
    with conn.transaction():
        conn.execute("INSERT INTO parley_schema (version, name) VALUES (999, 'from_the_future')")
    with pytest.raises(RecordError, match="upgrade Parley"):
        database.upgrade(conn)
    conn.close()


def test_an_unreachable_database_is_a_retryable_error() -> None:
    from worker.errors import DatabaseUnavailableError

    with pytest.raises(DatabaseUnavailableError) as info:
        database.connect("postgresql://127.0.0.1:1/nothing")
    assert info.value.retryable
