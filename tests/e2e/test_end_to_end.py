"""End to end: a real redis-server, two real Celery worker processes, a loopback OpenAI server and a loopback
WhatsApp API. Many conversations at once; every reply arrives once, in order; events reach the model;
compaction runs in the background while turns continue."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import BROKERS, Cluster
from tests.support.workers import wait_until
from worker.conversation.messages import EVENT_MARK
from worker.conversation.state import decode_state

pytestmark = pytest.mark.e2e


@BROKERS
@pytest.mark.parametrize("pool", ["threads", "gevent"])
def test_many_conversations_in_order_once_each(cluster: Cluster, pool: str) -> None:
    cluster.start_worker("w1", pool=pool)
    cluster.start_worker("w2", pool=pool)
    client = cluster.client()
    conversations = [f"4477009{i:05d}" for i in range(20)]
    per = 8
    for n in range(per):
        for cid in conversations:
            if n == 2:
                client.send_event(cid, f"{cid} tagged Harrogate Theatre", pinned=True)
            client.send_message(cid, f"{cid} question {n}", message_id=f"{cid}-m{n}")
    total = len(conversations) * per

    def done() -> bool:
        return len(cluster.whatsapp.sent) >= total

    assert wait_until(done, 90), (len(cluster.whatsapp.sent), [w.log() for w in cluster.workers])
    for cid in conversations:
        texts = cluster.whatsapp.texts_for(cid)
        assert texts == [f"ack:{cid} question {n}" for n in range(per)], texts
    # Events reached the model as context.
    seen = [json.dumps(r["messages"], ensure_ascii=False) for r in cluster.llm.requests]
    assert any(EVENT_MARK.strip() in s and "tagged Harrogate Theatre" in s for s in seen)
    # Auth and body shape on the WhatsApp side.
    assert cluster.whatsapp.headers[0].get("authorization") == "Bearer test-token"
    assert cluster.whatsapp.sent[0]["path"] == "/v21.0/106540352242922/messages"
    # Compaction ran in the background (the budget is tiny) and kept the pinned event.
    store = cluster.store()
    assert wait_until(lambda: all(store.inbox_depth(c) == 0 for c in conversations), 30)

    def compacted() -> bool:  # the splice lands a moment after the replies (it is queued behind the turn)
        return decode_state(store.read_state(conversations[0]).blob).meta.compactions >= 1

    assert wait_until(compacted, 30), decode_state(store.read_state(conversations[0]).blob).meta
    st = decode_state(store.read_state(conversations[0]).blob)
    visible = " ".join(m.content for m in st.messages + st.pinned)
    assert "tagged Harrogate Theatre" in visible
    assert all(w.alive() for w in cluster.workers)


def test_a_wake_up_the_accept_pushed_itself_runs_the_drain(cluster: Cluster) -> None:
    """Issue 33: the broker is the store's Redis, so the accept script pushes the wake-up (no kombu publish); a real
    Celery worker takes it as its own message and drains each conversation."""
    cluster.start_worker("w1")
    client = cluster.client()
    assert client._accept_wake is not None
    published: list[str] = []
    client._wake = published.append  # the kombu publish, were it called
    cids = [f"4477008{i:05d}" for i in range(5)]
    for n in range(2):
        for cid in cids:
            client.send_message(cid, f"{cid} q{n}", message_id=f"{cid}-q{n}")
    assert wait_until(lambda: len(cluster.whatsapp.sent) >= 2 * len(cids), 30), [w.log() for w in cluster.workers]
    assert published == []
    for cid in cids:
        assert cluster.whatsapp.texts_for(cid) == [f"ack:{cid} q0", f"ack:{cid} q1"]


def test_duplicate_submissions_apply_once(cluster: Cluster) -> None:
    cluster.start_worker("w1")
    client = cluster.client()
    for _ in range(5):
        client.send_message("447700900999", "hello", message_id="wamid.dup")
    assert wait_until(lambda: len(cluster.whatsapp.sent) >= 1, 30)
    assert not wait_until(lambda: len(cluster.whatsapp.sent) > 1, 2)
    assert cluster.whatsapp.texts_for("447700900999") == ["ack:hello"]


@pytest.mark.parametrize("pool", ["threads", "gevent"])
@pytest.mark.parametrize("cluster", [{"env": {"PARLEY_METRICS_PORT": "0"}}], indirect=True)
def test_worker_serves_prometheus_metrics(cluster: Cluster, pool: str) -> None:
    import httpx

    from tests.support.redis_server import free_port

    port = free_port()
    cluster.env["PARLEY_METRICS_PORT"] = str(port)
    cluster.start_worker("metrics", pool=pool)
    cluster.client().send_message("447700900777", "count me", message_id="m1")
    assert wait_until(lambda: len(cluster.whatsapp.sent) >= 1, 30)

    def scraped() -> str:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1).text
        except httpx.HTTPError:
            return ""

    assert wait_until(lambda: 'parley_inputs_total{kind="message",outcome="applied"} 1.0' in scraped(), 10)
    text = scraped()
    for name in ("parley_turn_seconds_bucket", "parley_llm_seconds_bucket", "parley_tokens_total",
                 'parley_deliveries_total{outcome="sent"}', 'parley_queue_waiting_conversations{queue="parley"} 0.0',
                 'parley_queue_oldest_input_age_seconds{queue="parley"}'):
        assert name in text, name
