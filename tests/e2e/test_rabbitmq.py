"""RabbitMQ as the broker: what differs from Redis, checked on a real RabbitMQ (a vhost per test).

The other end-to-end suites run their core tests on both brokers (``BROKERS`` in conftest); here: the queue is
declared as a quorum queue by workers and producers alike (RabbitMQ refuses a mismatched redeclaration), a lost
wake-up is still swept, and a conversation whose worker was SIGKILLed mid-flood is resumed with every input once,
in order.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.e2e.conftest import BROKERS, Cluster
from tests.support.workers import wait_until

pytestmark = pytest.mark.e2e

RABBIT = pytest.mark.parametrize("cluster", [{"broker": "rabbitmq"}], indirect=True, ids=["rabbitmq"])


def _health(cluster: Cluster) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "worker.cli", "health"], env=cluster.env, capture_output=True,
                          text=True, timeout=60)


def _queue_type(cluster: Cluster) -> str:
    vhost = cluster.broker_url.rsplit("/", 1)[1]
    out = subprocess.run(["rabbitmqctl", "-q", "list_queues", "-p", vhost, "name", "type"], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    types = dict(line.split("\t")[:2] for line in out.splitlines() if "\t" in line)
    return types.get("parley", "")


@RABBIT
def test_workers_and_producers_share_one_quorum_queue(cluster: Cluster) -> None:
    assert _health(cluster).returncode == 1  # no queue yet: reported, not declared as a classic one
    assert "no queue 'parley'" in _health(cluster).stderr
    client = cluster.client()
    client.send_message("447700900201", "before any worker", message_id="m1")  # the producer declares it first
    assert _queue_type(cluster) == "quorum"
    assert _health(cluster).returncode == 0
    w = cluster.start_worker("q1")  # and the worker's declaration must agree, or it could not consume
    client.send_message("447700900201", "after", message_id="m2")
    assert wait_until(lambda: len(cluster.whatsapp.sent) >= 2, 60), w.log()[-3000:]
    assert cluster.whatsapp.texts_for("447700900201") == ["ack:before any worker", "ack:after"]


@BROKERS
def test_a_lost_wake_up_is_swept(cluster: Cluster) -> None:
    w = cluster.start_worker("s1")
    store = cluster.store()
    # Queued as the player's message (it opens WhatsApp's window), and no wake-up sent.
    store.accept("447700900202", _envelope("447700900202", "nobody woke me"), "m1", inbound=True)
    assert wait_until(lambda: len(cluster.whatsapp.sent) >= 1, 60), w.log()[-3000:]
    assert cluster.whatsapp.texts_for("447700900202") == ["ack:nobody woke me"]


@RABBIT
def test_a_worker_killed_mid_flood_loses_nothing(cluster: Cluster) -> None:
    cluster.llm.delay = 0.05
    w1 = cluster.start_worker("k1", env={"PARLEY_DRAIN_MAX_TURNS": "5"})
    client = cluster.client()
    cid = "447700900203"
    for i in range(60):
        client.send_message(cid, f"line {i}", message_id=f"m{i}")
    assert wait_until(lambda: len(cluster.whatsapp.sent) >= 10, 60), w1.log()[-3000:]
    w1.kill(signal.SIGKILL)  # unacked wake-ups return when its connection closes; the lease runs out
    cluster.start_worker("k2")
    # Wait for the last reply, not for 60 sends: a reply resent in the send window counts as a send, and CI once
    # checked one reply early because of it.
    last = "ack:line 59"
    assert wait_until(lambda: last in cluster.whatsapp.texts_for(cid), 90), cluster.workers[-1].log()[-3000:]
    texts = cluster.whatsapp.texts_for(cid)
    # A reply sent but not yet marked sent when the kill landed may go out again (the documented send window);
    # inputs are applied once and in order whatever the broker.
    deduped = [t for n, t in enumerate(texts) if n == 0 or t != texts[n - 1]]
    assert deduped == [f"ack:line {i}" for i in range(60)]
    assert len(texts) - len(deduped) <= 1


def _envelope(cid: str, text: str) -> bytes:
    from worker.envelopes.inputs import Envelope

    return Envelope(kind="message", conversation_id=cid, message_id="m1", text=text).to_bytes()
