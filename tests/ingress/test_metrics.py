"""The ingress's metrics: every webhook and every message counted by outcome, served at ``GET /metrics``, summed
over the uvicorn workers the Procfile runs; ``/healthz`` says when signatures are failing (a wrong app secret)."""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import fakeredis
import httpx
import pytest
import redis
from prometheus_client import REGISTRY
from starlette.testclient import TestClient

from tests.ingress.test_ingress import SECRET, VERIFY, Rig, meta_bytes, sign, text_body, text_value
from tests.ingress.test_outcomes import real_redis
from tests.support.redis_server import free_port
from worker.client import ConversationClient
from worker.ingress.app import create_app
from worker.store.limits import StoreLimits
from worker.store.redis_store import ConversationStore

__all__ = ["real_redis"]

ROOT = pathlib.Path(__file__).resolve().parents[2]


def webhooks(outcome: str) -> float:
    return REGISTRY.get_sample_value("parley_webhooks_total", {"outcome": outcome}) or 0.0


def records(outcome: str) -> float:
    return REGISTRY.get_sample_value("parley_webhook_records_total", {"outcome": outcome}) or 0.0


class Counts:
    """The counters' increase since it was made."""

    def __init__(self) -> None:
        self.posts = {o: webhooks(o) for o in ("ok", "bad_signature", "too_large", "invalid", "mailbox_full",
                                               "unavailable")}
        self.recs = {o: records(o) for o in ("accepted", "event", "notice", "refused", "duplicate", "mailbox_full",
                                             "too_old", "status", "status_too_old", "ignored")}

    def post_delta(self) -> dict[str, float]:
        return {o: webhooks(o) - v for o, v in self.posts.items() if webhooks(o) - v}

    def record_delta(self) -> dict[str, float]:
        return {o: records(o) - v for o, v in self.recs.items() if records(o) - v}


def old_text(wamid: str, age: float) -> bytes:
    value = text_value(wamid, "447700900123", "hello again")
    value["messages"][0]["timestamp"] = str(int(time.time() - age))
    return meta_bytes({"entry": [{"changes": [{"field": "messages", "value": value}]}]})


def test_every_webhook_outcome_is_counted() -> None:
    rig = Rig()
    rig.client.max_text_chars = 10
    counts = Counts()
    raw = text_body(text="hi")
    assert rig.post(raw).status_code == 200
    assert rig.post(raw).status_code == 200  # Meta's retry: a duplicate
    assert rig.post(raw, signature="sha256=" + "0" * 64).status_code == 401
    assert rig.post(b"{not json").status_code == 400
    assert rig.post(b'{"object": "whatsapp_business_account"}').status_code == 400
    assert rig.post(old_text("wamid.OLD", 30 * 86400)).status_code == 200
    assert rig.post(text_body("wamid.LONG", text="far too long for ten")).status_code == 200
    small = TestClient(create_app(rig.client, rig.store, app_secret=SECRET, verify_token=VERIFY, max_body_bytes=50))
    assert small.post("/webhook", content=raw, headers={"X-Hub-Signature-256": sign(raw)}).status_code == 413
    assert counts.post_delta() == {"ok": 4, "bad_signature": 1, "invalid": 2, "too_large": 1}
    assert counts.record_delta() == {"accepted": 1, "duplicate": 1, "too_old": 1, "refused": 1}


def test_a_full_mailbox_and_a_redis_outage_are_counted() -> None:
    rig = Rig()
    full = ConversationStore(fakeredis.FakeRedis(server=rig.server), prefix="in", limits=StoreLimits(max_inbox=1))
    http = TestClient(create_app(ConversationClient(full, lambda c: None), full, app_secret=SECRET, verify_token=VERIFY))
    counts = Counts()
    for wamid in ("wamid.F1", "wamid.F2"):
        raw = text_body(wamid)
        http.post("/webhook", content=raw, headers={"X-Hub-Signature-256": sign(raw)})
    store = ConversationStore(redis.Redis(port=free_port(), socket_connect_timeout=0.2), prefix="x")
    down = TestClient(create_app(ConversationClient(store, lambda c: None), store, app_secret=SECRET,
                                 verify_token=VERIFY))
    raw = text_body()
    assert down.post("/webhook", content=raw, headers={"X-Hub-Signature-256": sign(raw)}).status_code == 503
    assert counts.post_delta() == {"ok": 1, "mailbox_full": 1, "unavailable": 1}
    assert counts.record_delta() == {"accepted": 1, "mailbox_full": 1}


def test_metrics_endpoint_serves_the_counts() -> None:
    rig = Rig()
    rig.post(text_body("wamid.M1"))
    body = rig.http.get("/metrics")
    assert body.status_code == 200 and body.headers["content-type"].startswith("text/plain")
    served = re.search(r'^parley_webhooks_total\{outcome="ok"\} (\S+)$', body.text, re.M)
    assert served is not None and float(served.group(1)) == webhooks("ok")


def test_healthz_says_when_every_recent_webhook_fails_its_signature() -> None:
    rig = Rig()
    rig.post(text_body("wamid.H1"))
    assert rig.http.get("/healthz").json()["webhook_signatures"] == "ok"
    time.sleep(0.01)
    for _ in range(3):  # the app secret was rotated in Meta's dashboard, not here
        assert rig.post(text_body("wamid.H2"), signature=sign(text_body("wamid.H2"), "another-secret")).status_code == 401
    health = rig.http.get("/healthz")
    # 200 all the same: anyone can post a bad signature, and a failing probe would let them take the ingress down.
    assert health.status_code == 200 and health.json()["ok"] is True
    assert health.json()["webhook_signatures"] == "failing"
    assert health.json()["last_bad_signature_at"] > health.json()["last_valid_signature_at"]
    time.sleep(0.01)
    rig.post(text_body("wamid.H3"))
    assert rig.http.get("/healthz").json()["webhook_signatures"] == "ok"


# --- the Procfile's webhook process: uvicorn with two workers ----------------------------------------------

def procfile_command(port: int) -> list[str]:
    line = next(ln for ln in (ROOT / "Procfile").read_text().splitlines() if ln.startswith("webhook:"))
    command = line.partition(":")[2].replace("${PORT:-8080}", str(port)).replace("${PARLEY_WEBHOOK_WORKERS:-2}", "2")
    assert "$" not in command, command
    return shlex.split(command)


@pytest.fixture
def webhook_process(tmp_path: pathlib.Path, real_redis: redis.Redis) -> Iterator[tuple[str, str]]:
    prefix = f"test{uuid.uuid4().hex[:12]}"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PARLEY_", "PROMETHEUS_"))}
    env.update(REDIS_URL="redis://127.0.0.1:6379/0", PARLEY_KEY_PREFIX=prefix, WHATSAPP_APP_SECRET=SECRET,
               WHATSAPP_VERIFY_TOKEN=VERIFY, PATH=f"{pathlib.Path(sys.executable).parent}:{env.get('PATH', '')}",
               PARLEY_LOG_LEVEL="WARNING", TMPDIR=str(tmp_path))
    proc = subprocess.Popen(procfile_command(port), cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "exited"
            assert time.monotonic() < deadline, "the webhook process did not start"
            time.sleep(0.2)
        yield url, prefix
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        for key in real_redis.scan_iter(match=f"{prefix}:*", count=1000):
            real_redis.delete(key)


def scraped(text: str, name: str, outcome: str) -> float:
    m = re.search(rf'^{name}\{{outcome="{outcome}"\}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def test_the_procfile_webhook_process_counts_across_its_two_workers(webhook_process: tuple[str, str],
                                                                    tmp_path: pathlib.Path) -> None:
    url, _ = webhook_process
    n_ok, n_bad = 24, 10
    for i in range(n_ok):
        raw = text_body(f"wamid.P{i}", sender=f"4477009{i:05d}")
        # A new connection each time, so the kernel hands the requests to both workers.
        r = httpx.post(f"{url}/webhook", content=raw, headers={"X-Hub-Signature-256": sign(raw)}, timeout=10)
        assert r.status_code == 200, r.text
    for i in range(n_bad):
        raw = text_body(f"wamid.B{i}")
        assert httpx.post(f"{url}/webhook", content=raw, headers={"X-Hub-Signature-256": sign(raw, "x")},
                          timeout=10).status_code == 401
    for _ in range(12):  # every scrape, whichever worker answers it, sees the sum
        text = httpx.get(f"{url}/metrics", timeout=10).text
        assert scraped(text, "parley_webhooks_total", "ok") == n_ok
        assert scraped(text, "parley_webhooks_total", "bad_signature") == n_bad
        assert scraped(text, "parley_webhook_records_total", "accepted") == n_ok
    # Both workers counted some (one file of counters each), so the scrapes above did add them up.
    assert len(list(tmp_path.glob("parley-ingress-metrics-*/*/counter_*.db"))) == 2
    health = httpx.get(f"{url}/healthz", timeout=10).json()
    assert health["ok"] is True and health["webhook_signatures"] == "failing"
