"""PARLEY_STATUS_WEBHOOKS=auto (the default): where the Procfile's webhook process runs, a part a crash left in
flight waits for its status instead of being resent (no duplicate on the player's phone); where none runs, it is
resent at once as before. The real ingress (`uvicorn worker.ingress.app:app`, the Procfile's command) on a real
redis-server announces itself; the worker's settings go through the same runtime mapping as in production."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.configs import bare_config
from tests.deploy.needs import ROOT, procfile
from tests.support.redis_server import RedisServer, free_port, start_redis
from tests.support.status_webhooks import status_body
from tests.worker.conftest import Harness, make_harness
from tests.worker.test_service_crashed_sends import CID, CrashingChannel, Killed, queue
from worker.runtime import service_config
from worker.service import RetryLater
from worker.settings import Settings
from worker.store.redis_store import ConversationStore

SECRET = "auto-secret"


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = start_redis()
    yield server
    server.stop()


def _crashed_worker(server: RedisServer, **env: Any) -> tuple[Harness, CrashingChannel]:
    """A worker with the settings' defaults (PARLEY_STATUS_WEBHOOKS unset, or ``env``) whose first send of a reply
    reached WhatsApp just before the process died."""
    settings = Settings(_env_file=None, **env)  # type: ignore[call-arg]
    config = bare_config(system_prompt="You are a test.", deliver_inline=False, resend_grace_ms=60_000,
                           status_webhooks=service_config(settings).delivery.statuses)  # as production maps it
    ch = CrashingChannel()
    h = make_harness(channel=ch, config=config, redis_client=server.client())
    queue(h)
    ch.crash_after_send = 0
    with pytest.raises(Killed):
        h.service.deliver(CID)
    return h, ch


def _webhook_process(server: RedisServer, prefix: str) -> tuple[subprocess.Popen[bytes], str]:
    """The Procfile's `webhook` command, on a free port."""
    port = free_port()
    argv = [a.replace("${PORT:-8080}", str(port)).replace("${PARLEY_WEBHOOK_WORKERS:-2}", "1")
            for a in shlex.split(procfile()["webhook"])]
    argv[0] = os.path.join(os.path.dirname(sys.executable), argv[0])
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    env.update(REDIS_URL=server.url, PARLEY_KEY_PREFIX=prefix, WHATSAPP_APP_SECRET=SECRET)
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("the webhook process did not start")


def test_where_the_webhook_process_runs_a_crashed_part_waits_for_its_status_and_is_not_resent(
        redis_server: RedisServer) -> None:
    h, ch = _crashed_worker(redis_server)
    proc, url = _webhook_process(redis_server, h.store.prefix)
    try:
        with pytest.raises(RetryLater):  # the ingress said it records statuses: wait for one, resend nothing
            h.service.deliver(CID)
        assert len(ch.sent) == 1
        sent = {"wamid": "wamid.reached", "body": {"to": CID, "biz_opaque_callback_data": ch.callbacks[0]}}
        raw = json.dumps(status_body(sent, "sent", "106540352242922")).encode()
        sig = "sha256=" + hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()
        answer = httpx.post(f"{url}/webhook", content=raw, timeout=10,
                            headers={"X-Hub-Signature-256": sig, "Content-Type": "application/json"})
        assert answer.status_code == 200, answer.text
    finally:
        proc.terminate()
        proc.wait(10)
    h.service.deliver(CID)
    assert [t for _, t, _ in ch.sent] == ["ack:one"]  # once on the player's phone
    assert h.store.delivered(CID) == [("m1", ["wamid.reached"])]


def test_where_no_ingress_runs_the_part_is_resent_at_once(redis_server: RedisServer) -> None:
    assert Settings(_env_file=None).delivery.status_webhooks == "auto"  # type: ignore[call-arg]
    h, ch = _crashed_worker(redis_server)
    assert h.service.deliver(CID) == 1
    assert [t for _, t, _ in ch.sent] == ["ack:one", "ack:one"]


def test_an_ingress_keeps_its_word_fresh_as_statuses_come(redis_server: RedisServer) -> None:
    from worker.store import delivery_statuses

    ingress = ConversationStore(redis_server.client(), prefix="fresh-word")
    other = ConversationStore(redis_server.client(), prefix="fresh-word")  # a worker or the CLI
    other.record_status(CID, "wamid.0", "sent")
    assert not other.status_ingress_announced()  # recording a status is not announcing
    ingress.announce_status_ingress()
    assert other.status_ingress_announced()
    redis_server.client().delete(ingress.global_keys.status_ingress)  # a day without statuses: the word ran out
    assert ingress._status_announced is not None
    ingress._status_announced -= delivery_statuses.STATUS_INGRESS_REFRESH_S + 1  # a minute later, a status comes
    ingress.record_status(CID, "wamid.1", "sent")
    assert other.status_ingress_announced()
    assert 0 < redis_server.client().pttl(ingress.global_keys.status_ingress) <= delivery_statuses.STATUS_INGRESS_TTL_MS


def test_an_explicit_false_wins_over_the_ingress_s_word(redis_server: RedisServer) -> None:
    h, ch = _crashed_worker(redis_server, status_webhooks="false")
    ConversationStore(redis_server.client(), prefix=h.store.prefix).announce_status_ingress()
    assert h.store.status_ingress_announced()
    assert h.service.deliver(CID) == 1
    assert [t for _, t, _ in ch.sent] == ["ack:one", "ack:one"]
