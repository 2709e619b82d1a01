"""End to end for the producers in any language: real Celery workers answer what a game engine sent through the HTTP
API (the webhook process under uvicorn) and through the stream inlet (`parley inlet` processes), once each and in
order, with the events in the model's context, while a worker and an inlet are SIGKILLed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import httpx
import pytest

from tests.chaos.harness import window_hits
from tests.e2e.conftest import Cluster
from tests.support.api_server import ApiProcess
from tests.support.workers import wait_until

pytestmark = pytest.mark.e2e

PER = 6


def _inlet(cluster: Cluster) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "worker.cli", "inlet"],
                            env={**cluster.env, "PARLEY_INLET_BATCH": "5", "PARLEY_INLET_CLAIM_IDLE_SECONDS": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_http_and_stream_inputs_are_answered_once_in_order_through_sigkills(cluster: Cluster) -> None:
    w1 = cluster.start_worker("w1")
    cluster.start_worker("w2")
    api = ApiProcess(cluster.env["REDIS_URL"], "game-token", **{k: v for k, v in cluster.env.items()
                                                                 if k.startswith("PARLEY_")}).start()
    inlets = [_inlet(cluster), _inlet(cluster)]
    by_http = [f"4477001{i:05d}" for i in range(5)]
    by_stream = [f"4477002{i:05d}" for i in range(5)]
    r = cluster.redis.client()
    try:
        with httpx.Client(base_url=api.url, headers={"Authorization": "Bearer game-token"}) as http:
            for n in range(PER):
                for cid in by_http:
                    if n == 1:
                        assert http.post(f"/v1/conversations/{cid}/events", json={
                            "text": f"{cid} tagged Harrogate Theatre", "pinned": True}).status_code == 202
                    ok = http.post(f"/v1/conversations/{cid}/messages",
                                   json={"text": f"{cid} question {n}", "message_id": f"{cid}-m{n}"})
                    assert ok.status_code == 202, ok.text
                for cid in by_stream:
                    if n == 1:
                        r.xadd("parley:inlet", {"envelope": json.dumps({
                            "kind": "event", "conversation_id": cid, "text": f"{cid} tagged Harrogate Theatre"})})
                    r.xadd("parley:inlet", {"envelope": json.dumps({
                        "kind": "message", "conversation_id": cid, "text": f"{cid} question {n}"})})
                if n == PER // 2:
                    w1.kill(signal.SIGKILL)
                    inlets[0].send_signal(signal.SIGKILL)
                    inlets.append(_inlet(cluster))
                    cluster.start_worker("w3")
        total = (len(by_http) + len(by_stream)) * PER
        assert wait_until(lambda: len(cluster.whatsapp.sent) >= total, 120), len(cluster.whatsapp.sent)
    finally:
        api.stop()
        for p in inlets:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            p.wait(15)
    resent = window_hits(w.log() for w in cluster.workers)
    for cid in by_http + by_stream:
        texts = cluster.whatsapp.texts_for(cid)
        once = [t for i, t in enumerate(texts) if i == 0 or t != texts[i - 1]]
        assert once == [f"ack:{cid} question {n}" for n in range(PER)], cid
        # A reply may arrive twice only where a worker was killed between sending it and marking it sent, and the
        # worker that took over logged resending it (invariant 5: the crash window, counted).
        assert len(texts) - len(once) <= sum(n for (c, _, _), n in resent.items() if c == cid), (cid, texts)
    seen = [json.dumps(req["messages"], ensure_ascii=False) for req in cluster.llm.requests]
    for cid in (by_http[0], by_stream[0]):
        assert any(f"{cid} tagged Harrogate Theatre" in s for s in seen), cid
    assert r.xlen("parley:inlet:dead") == 0
