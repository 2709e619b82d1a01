from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.postgres import fresh_database


@pytest.fixture
def database_url() -> Iterator[str]:
    with fresh_database() as url:
        yield url


@pytest.fixture
def db(database_url: str) -> Iterator[Any]:
    """A connection to a fresh database with the schema upgraded."""
    from worker.durable_record import database

    conn = database.connect(database_url)
    database.upgrade(conn)
    yield conn
    conn.close()
