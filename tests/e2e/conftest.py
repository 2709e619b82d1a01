from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.fake_openai import FakeOpenAI
from tests.support.fake_whatsapp import MEDIA_ENV, FakeWhatsApp
from tests.support.rabbitmq import rabbitmq_vhost
from tests.support.redis_sentinel import SentinelSetup, start_sentinel
from tests.support.redis_server import RedisServer, start_redis
from tests.support.workers import WorkerProcess, worker_env
from worker.client import ConversationClient
from worker.settings import Settings


@dataclass
class Cluster:
    redis: RedisServer
    llm: FakeOpenAI
    whatsapp: FakeWhatsApp
    env: dict[str, str]
    workers: list[WorkerProcess]
    broker: str = "redis"  # or "rabbitmq": PARLEY_BROKER_URL names a fresh vhost
    sentinel: SentinelSetup | None = None

    @property
    def broker_url(self) -> str:
        return self.env.get("PARLEY_BROKER_URL") or self.redis.url

    def client(self) -> ConversationClient:
        s = Settings(redis_url=self.env["REDIS_URL"], key_prefix=self.env["PARLEY_KEY_PREFIX"],
                     broker_url=self.env.get("PARLEY_BROKER_URL"), **self._replication())
        return ConversationClient._from_settings(s)

    def store(self):  # type: ignore[no-untyped-def]
        from worker.queue.connections import build_store

        return build_store(Settings(redis_url=self.env["REDIS_URL"], key_prefix=self.env["PARLEY_KEY_PREFIX"],
                                    **self._replication()))

    def _replication(self) -> dict[str, float]:
        """The producers wait for replicas as the workers do (else their accepts in a failover window vanish)."""
        return {"redis_wait_replicas": int(self.env.get("PARLEY_REDIS_WAIT_REPLICAS", "0")),
                "redis_wait_timeout": float(self.env.get("PARLEY_REDIS_WAIT_TIMEOUT", "1"))}

    def start_worker(self, name: str, concurrency: int = 8, pool: str = "threads",
                     env: dict[str, str] | None = None) -> WorkerProcess:
        """``env``: settings of this worker only, on top of the cluster's."""
        w = WorkerProcess(name, {**self.env, **(env or {})}, pool=pool, concurrency=concurrency).start()
        self.workers.append(w)
        return w


def cluster_env(redis_url: str, llm: FakeOpenAI, wa: FakeWhatsApp, extra: dict[str, str]) -> dict[str, str]:
    """The workers' environment of the end-to-end and chaos suites (``extra`` on top)."""
    return worker_env(
        redis_url,
        PARLEY_LLM_PROVIDER="openai",
        OPENAI_API_KEY="test-key",
        OPENAI_BASE_URL=llm.base_url,
        PARLEY_LLM_MODEL="gpt-4o-mini",
        WHATSAPP_API_BASE_URL=wa.base_url,
        WHATSAPP_PHONE_NUMBER_ID="106540352242922",
        WHATSAPP_ACCESS_TOKEN="test-token",
        PARLEY_LEASE_SECONDS="5",
        PARLEY_COMPACTION_MAX_TOKENS="400",
        PARLEY_COMPACTION_KEEP_LAST="2",
        PARLEY_LLM_TIMEOUT="5",
        PARLEY_MAX_ATTEMPTS="5",
        PARLEY_LLM_BREAKER_RESET="2",
        PARLEY_MAX_RETRY_DELAY="4",
        # These suites send a player many replies within seconds; at Meta's pair rate (the default) the later ones
        # would wait minutes. tests/e2e/test_pacing.py is where the pace is tested.
        **{"PARLEY_WHATSAPP_RECIPIENT_PER_MINUTE": "600", **MEDIA_ENV, **extra},
    )


BROKERS = pytest.mark.parametrize("cluster", [{"broker": "redis"}, {"broker": "rabbitmq"}], indirect=True,
                                  ids=["redis", "rabbitmq"])
"""Run a test on both brokers (``PARLEY_BROKER_URL`` unset: Redis; set: a RabbitMQ vhost of the test's own)."""


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    param = getattr(request, "param", {})
    broker = param.get("broker", "redis")
    vhost = rabbitmq_vhost() if broker == "rabbitmq" else None
    # {"sentinel": True}: state and broker on a Sentinel-managed master with one replica (REDIS_URL is the
    # redis+sentinel:// URL; ``cluster.sentinel`` fails it over); ``cluster.redis`` is the first master.
    sentinel = start_sentinel() if param.get("sentinel") else None
    if sentinel is not None:
        redis = RedisServer(port=sentinel.ports["a"], dir=sentinel.dir)
    else:
        redis = start_redis(appendonly=param.get("appendonly", False))
    llm = FakeOpenAI().start()
    wa = FakeWhatsApp().start()
    env = cluster_env(redis.url, llm, wa, param.get("env", {}))
    if vhost is not None:
        env["PARLEY_BROKER_URL"] = vhost.url
    if sentinel is not None:
        env["REDIS_URL"] = sentinel.url
    c = Cluster(redis, llm, wa, env, [], broker, sentinel)
    yield c
    for w in c.workers:
        w.stop()
    if os.environ.get("PARLEY_TEST_SHOW_LOGS"):
        for w in c.workers:
            print(w.log())
    wa.stop()
    llm.stop()
    redis.stop()
    if sentinel is not None:
        sentinel.stop()
    if vhost is not None:
        vhost.delete()
