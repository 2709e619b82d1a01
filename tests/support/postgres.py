"""A fresh PostgreSQL database per test on the machine's server (127.0.0.1:5432, trust authentication).

The admin URL (``PARLEY_TEST_DATABASE_URL``, default the ``postgres`` database as the current user) must be allowed
to create databases; each test gets ``parley_t_<random>``, dropped afterwards whatever it left connected.
Unavailable: skipped on a developer's machine, failed in CI (a real backend may not be skipped there).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.redis_server import skip_or_fail

ADMIN_URL = os.environ.get("PARLEY_TEST_DATABASE_URL", "postgresql://127.0.0.1:5432/postgres")


def _with_db(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


@contextmanager
def fresh_database() -> Iterator[str]:
    """The URL of a new, empty database, dropped on exit."""
    try:
        import psycopg
    except ImportError:
        skip_or_fail("psycopg is not installed (pip install -e '.[dev]')")
        raise
    name = f"parley_t_{uuid.uuid4().hex[:12]}"
    try:
        admin = psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        skip_or_fail(f"no PostgreSQL at {ADMIN_URL}: {exc}")
        raise
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield _with_db(ADMIN_URL, name)
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
