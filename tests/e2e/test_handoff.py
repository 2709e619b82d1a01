"""End to end, a person takes a conversation over: a real redis-server, two real Celery workers, a loopback OpenAI
server and a loopback WhatsApp API. While paused no model call and no reply; the operator's messages arrive in
order, once; after resume the model's request holds what the player said meanwhile and the operator's words; a
timed pause ends by itself; the paused-conversations gauge counts from Redis."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.conftest import Cluster
from tests.support.redis_server import free_port
from tests.support.workers import wait_until
from worker.conversation.messages import EVENT_MARK

pytestmark = pytest.mark.e2e

# A compaction budget the test never reaches: the model's request must hold the whole conversation.
ROOMY = {"PARLEY_COMPACTION_MAX_TOKENS": "100000"}


def _scrape(port: int) -> str:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1).text
    except httpx.HTTPError:
        return ""


def test_a_person_takes_over_and_hands_back(cluster: Cluster) -> None:
    port = free_port()
    cluster.start_worker("w1", env={**ROOMY, "PARLEY_METRICS_PORT": str(port)})
    cluster.start_worker("w2", env=ROOMY)
    client, store = cluster.client(), cluster.store()
    cid = "447700900321"
    client.send_message(cid, "hello", message_id="m0")
    assert wait_until(lambda: cluster.whatsapp.texts_for(cid) == ["ack:hello"], 30)

    client.pause(cid)
    asked = len(cluster.llm.requests)
    client.send_message(cid, "I am stuck at the fountain", message_id="m1")
    client.send_event(cid, "User has just tagged Harrogate Theatre", message_id="e1")
    client.send_message(cid, "hello??", message_id="m2")
    said = [f"operator says {i}" for i in range(6)]
    for i, text in enumerate(said):
        client.send_operator_message(cid, text, message_id=f"op{i}")
        client.send_operator_message(cid, text, message_id=f"op{i}")  # a resubmission: nothing new
    assert wait_until(lambda: cluster.whatsapp.texts_for(cid) == ["ack:hello", *said], 30), \
        cluster.whatsapp.texts_for(cid)
    assert wait_until(lambda: store.inbox_depth(cid) == 0 and store.outbox_depth(cid) == 0, 30)
    assert len(cluster.llm.requests) == asked  # no model call while paused
    assert wait_until(lambda: "parley_paused_conversations 1.0" in _scrape(port), 15), _scrape(port)

    assert client.resume(cid) is True
    client.send_message(cid, "found it", message_id="m3")
    assert wait_until(lambda: cluster.whatsapp.texts_for(cid)[-1:] == ["ack:found it"], 30)
    assert cluster.whatsapp.texts_for(cid) == ["ack:hello", *said, "ack:found it"]  # once each, in order
    request = cluster.llm.requests[-1]["messages"]
    seen = [(m["role"], m.get("content")) for m in request if m["role"] != "system" or EVENT_MARK.strip() in
            str(m.get("content"))]
    assert seen == [("user", "hello"), ("assistant", "ack:hello"), ("user", "I am stuck at the fountain"),
                    ("system", EVENT_MARK + "User has just tagged Harrogate Theatre"), ("user", "hello??"),
                    *[("assistant", text) for text in said], ("user", "found it")], seen
    assert wait_until(lambda: "parley_paused_conversations 0.0" in _scrape(port), 15)
    assert all(w.alive() for w in cluster.workers)


def test_a_timed_pause_ends_by_itself(cluster: Cluster) -> None:
    cluster.start_worker("w1", env=ROOMY)
    client, store = cluster.client(), cluster.store()
    cid = "447700900322"
    client.send_message("447700900323", "warm up", message_id="w0")  # the worker is up and draining
    assert wait_until(lambda: cluster.whatsapp.texts_for("447700900323") == ["ack:warm up"], 30)
    client.pause(cid, seconds=5)
    client.send_message(cid, "anyone there?", message_id="d1")
    assert wait_until(lambda: store.inbox_depth(cid) == 0, 30)
    assert cluster.whatsapp.texts_for(cid) == [] and len(cluster.llm.requests) == 1
    assert wait_until(lambda: store.paused(cid) is None, 10)  # nobody resumed it
    client.send_message(cid, "hello again", message_id="d2")
    assert wait_until(lambda: cluster.whatsapp.texts_for(cid) == ["ack:hello again"], 30)
    users = [m["content"] for m in cluster.llm.requests[-1]["messages"] if m["role"] == "user"]
    assert users == ["anyone there?", "hello again"]
