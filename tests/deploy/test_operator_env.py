"""The Procfile's processes run with docker/.env.example and docker/config/ as an operator ships them (docker does
not run on these machines; honcho and compose hand a process the same variables): the webhook answers Meta's
handshake and takes a signed message, the worker answers it with the config folder's system prompt and tools, the
inlet serves its metrics, and the example's one OTLP endpoint gets the trace of both processes, with the player's
number shown as a pseudonym."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
import yaml

from tests.deploy import needs
from tests.support.fake_openai import FakeOpenAI
from tests.support.fake_whatsapp import FakeWhatsApp
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.redis_server import RedisServer, free_port, redis_of_its_own
from tests.support.whatsapp_fixtures import as_if_sent_now, fixture_payload, needs_fixtures
from tests.support.workers import wait_until

server = pytest.fixture(redis_of_its_own)
PLAYER = "16505551234"  # the wa_id of the shared inbound_text fixture


def operator_env(redis_url: str, receiver: OtlpReceiver) -> dict[str, str]:
    """The example .env with its documented file and trace lines switched on, as an operator would: the config
    folder's mount point read as docker/config/, the collector as ``receiver``."""
    active, commented = needs.example_env()
    read = set(re.findall(r"\$\{([A-Z0-9_]+)\}", "".join(
        p.read_text() for p in needs.CONFIG_DIR.iterdir() if p.is_file())))  # the ${VAR}s the config files read
    on = {k: v for k, v in commented.items() if v.startswith(needs.CONFIG_MOUNT + "/") or k in read}
    env = {**active, **on, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
    env = {k: v.replace(needs.CONFIG_MOUNT, str(needs.CONFIG_DIR)) for k, v in env.items()}
    env["REDIS_URL"] = redis_url  # compose's own Redis, here a local one on a free port
    return env


class Formation:
    """The Procfile's processes, each run by a shell as honcho runs it (``${VAR:-default}`` expanded)."""

    def __init__(self, env: dict[str, str], cwd: pathlib.Path) -> None:
        self.env, self.cwd = env, cwd
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, pathlib.Path] = {}

    def start(self, name: str, **own: str) -> None:
        self.logs[name] = self.cwd / f"{name}.log"
        with self.logs[name].open("wb") as log:
            self.procs[name] = subprocess.Popen(["sh", "-c", "exec " + needs.procfile()[name]], cwd=self.cwd,
                                                env={**self.env, **own, "OTEL_SERVICE_NAME": f"parley-{name}"},
                                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def log(self, name: str) -> str:
        return self.logs[name].read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


@pytest.fixture
def peers() -> Iterator[tuple[FakeOpenAI, FakeWhatsApp, OtlpReceiver]]:
    active, _ = needs.example_env()
    llm, wa, receiver = FakeOpenAI().start(), FakeWhatsApp(access_token=active["WHATSAPP_ACCESS_TOKEN"]).start(), \
        OtlpReceiver().start()
    yield llm, wa, receiver
    for peer in (llm, wa, receiver):
        peer.stop()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@needs_fixtures
def test_the_procfile_runs_with_the_example_env_and_config_folder(
        server: RedisServer, peers: tuple[FakeOpenAI, FakeWhatsApp, OtlpReceiver], tmp_path: pathlib.Path) -> None:
    llm, wa, receiver = peers
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PARLEY_", "OTEL_", "OPENAI_", "ANTHROPIC_", "WHATSAPP_")) and k != "REDIS_URL"}
    env.update(operator_env(server.url, receiver))
    # What only this machine needs: the model and WhatsApp on loopback, the worktree's code, a small pool, quick
    # span batches.
    env.update(OPENAI_BASE_URL=llm.base_url, WHATSAPP_API_BASE_URL=wa.base_url, PYTHONPATH=str(needs.ROOT),
               PATH=f"{pathlib.Path(sys.executable).parent}:{env.get('PATH', '')}", PARLEY_CONCURRENCY="4",
               PARLEY_WEBHOOK_WORKERS="1", OTEL_BSP_SCHEDULE_DELAY="100", PARLEY_BURST_QUIET_SECONDS="0")
    web, worker_metrics, inlet_metrics = free_port(), free_port(), free_port()
    formation = Formation(env, tmp_path)
    try:
        formation.start("webhook", PORT=str(web))
        formation.start("worker", PARLEY_METRICS_PORT=str(worker_metrics))
        formation.start("inlet", PARLEY_METRICS_PORT=str(inlet_metrics))
        base = f"http://127.0.0.1:{web}"
        for name, url in (("webhook", f"{base}/healthz"), ("worker", f"http://127.0.0.1:{worker_metrics}/metrics"),
                          ("inlet", f"http://127.0.0.1:{inlet_metrics}/metrics")):
            assert wait_until(lambda u=url: _answers(u), 90), f"{name} does not answer: {formation.log(name)}"

        token = env["WHATSAPP_VERIFY_TOKEN"]
        handshake = httpx.get(f"{base}/webhook", params={"hub.mode": "subscribe", "hub.verify_token": token,
                                                          "hub.challenge": "1158201444"}, timeout=5)
        assert (handshake.status_code, handshake.text) == (200, "1158201444")

        raw = json.dumps(as_if_sent_now(fixture_payload("inbound_text.json"))).encode()
        sig = "sha256=" + hmac.new(env["WHATSAPP_APP_SECRET"].encode(), raw, hashlib.sha256).hexdigest()
        posted = httpx.post(f"{base}/webhook", content=raw, timeout=5,
                            headers={"X-Hub-Signature-256": sig, "Content-Type": "application/json"})
        assert posted.status_code == 200, posted.text
        assert wait_until(lambda: bool(wa.texts_for(PLAYER)), 90), formation.log("worker")

        # The game's configuration came from the config folder: the prompt file and the tools file.
        request = llm.requests[0]
        prompt = (needs.CONFIG_DIR / "system_prompt.txt").read_text().strip()
        assert request["messages"][0] == {"role": "system", "content": prompt}, request["messages"][0]
        manifest = yaml.safe_load((needs.CONFIG_DIR / "tools.yaml").read_text())
        offered = {t["function"]["name"] for t in request.get("tools", [])}
        assert {t["name"] for t in manifest["tools"]} <= offered, offered

        # Traces: the one endpoint of .env gets both processes' spans of that message, in one trace.
        def traced() -> bool:
            services = {s.service for s in receiver.spans}
            return {"parley-webhook", "parley-worker"} <= services and bool(receiver.named("send"))
        assert receiver.wait_for(traced, 30), {(s.service, s.name) for s in receiver.spans}
        [send] = receiver.named("send")
        assert {s.service for s in receiver.trace(send.trace_id)} >= {"parley-webhook", "parley-worker"}
        shown = {s.attributes["gen_ai.conversation.id"] for s in receiver.spans if "gen_ai.conversation.id" in
                 s.attributes}
        assert shown and all(v.startswith("p_") for v in shown) and not any(
            PLAYER in json.dumps(s.attributes) for s in receiver.spans)
        for name, proc in formation.procs.items():
            assert proc.poll() is None, f"{name} exited: {formation.log(name)}"
    finally:
        formation.stop()
