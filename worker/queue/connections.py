"""The Redis connections a process opens from its settings: the state store's client (standalone, Sentinel-managed or
Cluster, from the one URL :mod:`worker.queue.sentinel` parses for the broker too) and the store over it. Every
process builds its store here, the producers' client as the workers, so all of them agree (on the pseudonyms their
traces show for conversation ids too)."""

from __future__ import annotations

from typing import Any

import redis

from worker.observability.tracing.pseudonyms import PSEUDONYMS
from worker.queue import sentinel
from worker.settings import Settings
from worker.store.redis_store import ConversationStore, StoreLimits
from worker.store.trace_ids import fleet_trace_key


def redis_client(settings: Settings) -> Any:
    """A redis-py client for conversation state (a cluster client when ``PARLEY_REDIS_CLUSTER`` is set)."""
    url = settings.redis.effective_url()
    if sentinel.is_sentinel(url):
        return _sentinel_master(sentinel.parse(url), settings)
    if settings.redis.cluster:
        from redis.cluster import RedisCluster

        return RedisCluster.from_url(url, max_connections=settings.redis.max_connections)
    # Blocking: with a threads pool of hundreds, a thread waits for a free connection instead of failing with
    # "Too many connections"; each holds one only for the length of a command or script.
    pool = redis.BlockingConnectionPool.from_url(url, max_connections=settings.redis.max_connections, timeout=20,
                                                 health_check_interval=30, socket_keepalive=True)
    return redis.Redis(connection_pool=pool)


def _sentinel_master(s: sentinel.SentinelURL, settings: Settings) -> Any:
    """A client of whichever server the sentinels name master now: after a failover its next connection asks them
    again, and a write the demoted master refuses (READONLY) drops the connection so the retry finds the new one."""
    from redis.sentinel import Sentinel

    kwargs = {"password": s.sentinel_password} if s.sentinel_password else {}
    watchers = Sentinel(list(s.sentinels), socket_timeout=2.0,  # type: ignore[no-untyped-call]
                        sentinel_kwargs={"socket_timeout": 2.0, **kwargs})
    return watchers.master_for(  # type: ignore[no-untyped-call]
        s.master, db=s.db, password=s.password, socket_timeout=10.0, socket_keepalive=True,
        max_connections=settings.redis.max_connections, health_check_interval=30)


def build_store(settings: Settings, client: Any = None) -> ConversationStore:
    """The store over ``client`` (default: :func:`redis_client`); the process's traces then hide conversation ids
    with the key of that Redis (or ``PARLEY_TRACE_ID_KEY``), the one every process of the deployment uses."""
    store, redis = settings.store, settings.redis
    client = client if client is not None else redis_client(settings)
    _hide_ids(settings, client)
    limits = StoreLimits(max_inbox=store.max_inbox, dedupe_max_ids=store.dedupe_max_ids, dedupe_ms=store.dedupe_ms,
                         trace_max=store.trace_max, idle_ttl_ms=store.idle_ttl_ms, tombstone_ms=store.tombstone_ms,
                         wait_replicas=redis.wait_replicas, wait_timeout_ms=redis.wait_timeout_ms,
                         record_max=settings.record.stream_limit, max_timers=store.max_timers,
                         recall_max_bytes=store.recall_max_bytes)
    return ConversationStore(client, prefix=settings.redis.key_prefix, limits=limits)


def _hide_ids(settings: Settings, client: Any) -> None:
    """Configure the pseudonyms of this process's traces (the key is read from Redis only when a span needs one)."""
    obs, prefix = settings.observability, settings.redis.key_prefix
    PSEUDONYMS.configure(key=obs.trace_id_key.get_secret_value() if obs.trace_id_key is not None else None,
                         plain=obs.trace_plain_ids, source=lambda: fleet_trace_key(client, prefix))
