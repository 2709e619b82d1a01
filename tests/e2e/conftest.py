from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.fake_openai import FakeOpenAI
from tests.support.fake_whatsapp import FakeWhatsApp
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

    def client(self) -> ConversationClient:
        s = Settings(redis_url=self.redis.url, key_prefix=self.env["PARLEY_KEY_PREFIX"])
        return ConversationClient._from_settings(s)

    def store(self):  # type: ignore[no-untyped-def]
        from worker.runtime import build_store

        return build_store(Settings(redis_url=self.redis.url, key_prefix=self.env["PARLEY_KEY_PREFIX"]))

    def start_worker(self, name: str, concurrency: int = 8, pool: str = "threads",
                     env: dict[str, str] | None = None) -> WorkerProcess:
        """``env``: settings of this worker only, on top of the cluster's."""
        w = WorkerProcess(name, {**self.env, **(env or {})}, pool=pool, concurrency=concurrency).start()
        self.workers.append(w)
        return w


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    param = getattr(request, "param", {})
    redis = start_redis(appendonly=param.get("appendonly", False))
    llm = FakeOpenAI().start()
    wa = FakeWhatsApp().start()
    env = worker_env(
        redis.url,
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
        **{"PARLEY_WHATSAPP_RECIPIENT_PER_MINUTE": "600", **param.get("env", {})},
    )
    c = Cluster(redis, llm, wa, env, [])
    yield c
    for w in c.workers:
        w.stop()
    if os.environ.get("PARLEY_TEST_SHOW_LOGS"):
        for w in c.workers:
            print(w.log())
    wa.stop()
    llm.stop()
    redis.stop()
