"""One contract suite, every backend: fakeredis (fast), the machine's redis-server, and a redis-server this
suite starts itself on a free port."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import fakeredis
import pytest
import redis

from tests.support.redis_server import RedisServer, start_redis
from worker.store.redis_store import ConversationStore, StoreLimits

_own: RedisServer | None = None


def _own_server() -> RedisServer:
    global _own
    if _own is None:
        _own = start_redis()
    return _own


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _own is not None:
        _own.stop()


def make_client(backend: str) -> redis.Redis:
    if backend == "fakeredis":
        return fakeredis.FakeRedis(server=fakeredis.FakeServer())
    if backend == "redis":
        client = redis.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=0.5)
        try:
            client.ping()
        except redis.RedisError:
            pytest.skip("no redis-server at 127.0.0.1:6379")
        return client
    return _own_server().client()


@pytest.fixture(params=["fakeredis", "redis", "own-redis"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def client(backend: str) -> Iterator[redis.Redis]:
    c = make_client(backend)
    yield c


@pytest.fixture
def prefix() -> str:
    return f"test{uuid.uuid4().hex[:10]}"


@pytest.fixture
def store(client: redis.Redis, prefix: str) -> Iterator[ConversationStore]:
    s = ConversationStore(client, prefix=prefix, limits=StoreLimits(max_inbox=50, dedupe_max_ids=100, trace_max=5,
                                                                    dead_max=5, quarantine_max=3))
    yield s
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        client.delete(key)
