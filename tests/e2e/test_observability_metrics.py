"""End to end: every metric the Grafana dashboard and the Prometheus alert rules (docker/observability) name is one
the running processes export. A real Celery worker, the webhook process under uvicorn (with a tokens file), a real
`parley exporter` (with PostgreSQL) and a real `parley inlet`, each serving /metrics as deployed; a player's message
goes in through a signed webhook, the turn is answered and sent, the exporter copies the record, the inlet moves an
entry it cannot read aside; then the four are scraped. A histogram is named by its _bucket/_sum/_count series, a
counter by its _total one. The labelled counters the alerts take an increase of are exported from 0 before their
first count (a series that appears at 1 shows Prometheus no increase)."""

from __future__ import annotations

import hashlib
import hmac
import json
import pathlib
import re
import subprocess
import sys
import time

import httpx
import pytest
import redis

from tests.e2e.conftest import Cluster
from tests.support.api_server import ApiProcess
from tests.support.inlet_processes import start_inlet, stop_inlets
from tests.support.observability import exported_series, named_metrics
from tests.support.postgres import fresh_database
from tests.support.redis_server import free_port
from tests.support.workers import ROOT, wait_until

pytestmark = pytest.mark.e2e

SECRET = "app-secret"
PLAYER = "447700900456"


def _webhook_body(wamid: str, text: str) -> bytes:
    value = {"messaging_product": "whatsapp", "metadata": {"phone_number_id": "106540352242922"},
             "contacts": [{"wa_id": PLAYER, "profile": {"name": "Sam"}}],
             "messages": [{"from": PLAYER, "id": wamid, "timestamp": str(int(time.time())), "type": "text",
                           "text": {"body": text}}]}
    return json.dumps({"object": "whatsapp_business_account",
                       "entry": [{"id": "1", "changes": [{"field": "messages", "value": value}]}]}).encode()


def _post(url: str, raw: bytes, secret: str = SECRET) -> int:
    signature = "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()
    return httpx.post(f"{url}/webhook", content=raw, headers={"X-Hub-Signature-256": signature,
                                                              "Content-Type": "application/json"}, timeout=10).status_code


def _scrape(url: str) -> str:
    try:
        return httpx.get(f"{url}/metrics", timeout=2).text
    except httpx.HTTPError:
        return ""


def _value(text: str, series: str) -> float:
    m = re.search(rf"^{re.escape(series)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def _exported_at(text: str, series: str) -> float | None:
    m = re.search(rf"^{re.escape(series)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def test_every_metric_the_dashboard_and_the_rules_name_is_exported(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    with fresh_database() as db:
        env = {**cluster.env, "PARLEY_DATABASE_URL": db}
        up = subprocess.run([sys.executable, "-m", "worker.cli", "db", "upgrade"], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
        assert up.returncode == 0, up.stderr
        worker_port, exporter_port, inlet_port = free_port(), free_port(), free_port()
        cluster.start_worker("observed", env={**env, "PARLEY_METRICS_PORT": str(worker_port)})
        exporter = subprocess.Popen([sys.executable, "-m", "worker.cli", "exporter"], cwd=ROOT,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    env={**env, "PARLEY_METRICS_PORT": str(exporter_port),
                                         "PARLEY_EXPORTER_IDLE_SECONDS": "0.05"})
        tokens = tmp_path / "tokens.json"
        tokens.write_text(json.dumps({"tokens": [{"token": "game-token", "scope": "producer"}]}))
        webhook = ApiProcess(env["REDIS_URL"], "", **{k: v for k, v in env.items() if k.startswith("PARLEY_")},
                             WHATSAPP_APP_SECRET=SECRET, WHATSAPP_VERIFY_TOKEN="verify",
                             PARLEY_API_TOKENS_FILE=str(tokens)).start()
        inlet = start_inlet({**env, "PARLEY_METRICS_PORT": str(inlet_port)}, "observed-inlet")
        inlet_url = f"http://127.0.0.1:{inlet_port}"
        try:
            assert wait_until(lambda: "parley_inlet_entries_total" in _scrape(inlet_url), 30)
            assert _exported_at(_scrape(inlet_url), 'parley_inlet_entries_total{outcome="dead"}') == 0
            assert _exported_at(_scrape(webhook.url), 'parley_api_tokens_file_loads_total{outcome="refused"}') == 0
            redis.Redis.from_url(env["REDIS_URL"]).xadd("parley:inlet", {"envelope": "{not json"})
            assert wait_until(
                lambda: _value(_scrape(inlet_url), 'parley_inlet_entries_total{outcome="dead"}') == 1, 30)
            assert _post(webhook.url, _webhook_body("wamid.OBS1", "where next?")) == 200
            assert _post(webhook.url, _webhook_body("wamid.OBS1", "where next?")) == 200  # Meta's retry: a duplicate
            assert _post(webhook.url, _webhook_body("wamid.OBS2", "forged"), secret="wrong") == 401
            assert wait_until(lambda: cluster.whatsapp.texts_for(PLAYER) == ["ack:where next?"], 30), \
                cluster.workers[0].log()
            worker_url, exporter_url = f"http://127.0.0.1:{worker_port}", f"http://127.0.0.1:{exporter_port}"
            assert wait_until(lambda: _value(_scrape(worker_url), "parley_reply_latency_seconds_count") == 1, 10)
            assert wait_until(lambda: _value(_scrape(exporter_url), "parley_records_exported_total") >= 1, 30)
            scraped = {"worker": _scrape(worker_url), "webhook": _scrape(webhook.url),
                       "exporter": _scrape(exporter_url), "inlet": _scrape(inlet_url)}
        finally:
            stop_inlets([inlet])
            webhook.stop()
            exporter.terminate()
            exporter.wait(20)
    exported = {name: exported_series(text) for name, text in scraped.items()}
    every = set().union(*exported.values())
    named = named_metrics()
    missing = {name: sorted(where) for name, where in named.items() if name not in every}
    assert not missing, missing
    assert len(named) >= 30  # the scan found the dashboard's and the rules' expressions
    # The turn's own figures reached the series the dashboard reads, each from the process that counts it.
    worker, ingress = scraped["worker"], scraped["webhook"]
    assert _value(worker, 'parley_model_request_seconds_count{provider="openai"}') >= 1
    assert _value(worker, 'parley_deliveries_total{outcome="sent"}') == 1
    assert _value(ingress, 'parley_webhooks_total{outcome="ok"}') == 2
    assert _value(ingress, 'parley_webhooks_total{outcome="bad_signature"}') == 1
    assert _value(ingress, 'parley_webhook_records_total{outcome="duplicate"}') == 1
    assert _value(scraped["exporter"], "parley_record_lag_seconds") >= 0
