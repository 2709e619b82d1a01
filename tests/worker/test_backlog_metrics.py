"""The autoscaling gauges as a scrape shows them: read from Redis on each scrape, and absent (not an error page)
when Redis is down."""

from __future__ import annotations

import fakeredis
from prometheus_client import CollectorRegistry, generate_latest

from worker.errors import StoreUnavailableError
from worker.service.backlog import BacklogCollector
from worker.store.redis_store import ConversationStore, StoreLimits


def _scrape(store: ConversationStore) -> str:
    registry = CollectorRegistry()
    registry.register(BacklogCollector(store, "parley", 1000))
    return generate_latest(registry).decode()


def test_a_scrape_reads_the_backlog_from_redis() -> None:
    store = ConversationStore(fakeredis.FakeRedis(), prefix="bl", limits=StoreLimits())
    assert 'parley_queue_waiting_conversations{queue="parley"} 0.0' in _scrape(store)
    store.accept("447700900001", b"x", "x-1")
    store.accept("447700900002", b"y", "y-1")
    text = _scrape(store)
    assert 'parley_queue_waiting_conversations{queue="parley"} 2.0' in text
    assert 'parley_queue_oldest_input_age_seconds{queue="parley"}' in text


def test_redis_down_leaves_the_gauges_out_of_the_scrape() -> None:
    store = ConversationStore(fakeredis.FakeRedis(), prefix="bl", limits=StoreLimits())

    def down(sample: int = 1000) -> None:
        raise StoreUnavailableError("connection refused")

    store.backlog = down  # type: ignore[assignment,method-assign]
    text = _scrape(store)
    assert "parley_queue_waiting_conversations{" not in text
