"""Recovery with real worker processes: SIGKILL mid-turn, a stalled worker whose lease ran out, pickle refusal."""

from __future__ import annotations

import os
import pickle
import signal
import tempfile
import uuid

import pytest
from kombu import Connection

from tests.e2e.conftest import BROKERS, Cluster
from tests.support.store_kit import settled
from tests.support.workers import wait_until

pytestmark = pytest.mark.e2e

CID = "447700900555"


@BROKERS
@pytest.mark.parametrize("pool", ["threads", "gevent"])
def test_sigkilled_worker_turn_is_resumed_by_another(cluster: Cluster, pool: str) -> None:
    cluster.llm.delay = 2.0
    w1 = cluster.start_worker("w1", pool=pool)
    client = cluster.client()
    client.send_message(CID, "are you there?", message_id="m1")
    assert wait_until(lambda: len(cluster.llm.requests) >= 1, 30), w1.log()
    w1.kill(signal.SIGKILL)  # dies with the turn in flight: nothing committed, nothing acked
    cluster.llm.delay = 0.0
    cluster.start_worker("w2", pool=pool)
    assert wait_until(lambda: len(cluster.whatsapp.sent) >= 1, 40), cluster.workers[1].log()
    store = cluster.store()
    assert wait_until(lambda: settled(store, CID), 30), cluster.workers[1].log()  # no reply can come after this
    assert cluster.whatsapp.texts_for(CID) == ["ack:are you there?"]


@BROKERS
def test_stalled_worker_cannot_commit_over_newer_state(cluster: Cluster) -> None:
    cluster.llm.delay = 2.0
    a = cluster.start_worker("stalled")
    client = cluster.client()
    client.send_message(CID, "first", message_id="m1")
    assert wait_until(lambda: len(cluster.llm.requests) >= 1, 30), a.log()
    a.kill(signal.SIGSTOP)  # a GC pause, a frozen VM: its lease (5 s) runs out
    cluster.llm.delay = 0.0
    b = cluster.start_worker("fresh")
    assert wait_until(lambda: len(cluster.whatsapp.sent) >= 1, 40), b.log()
    client.send_message(CID, "second", message_id="m2")
    assert wait_until(lambda: len(cluster.whatsapp.sent) >= 2, 30)
    a.kill(signal.SIGCONT)  # it wakes up and tries to commit its stale turn
    assert wait_until(lambda: "lease lost" in a.log(), 20), a.log()  # its commit was refused by the fence
    store = cluster.store()
    assert wait_until(lambda: settled(store, CID), 30), a.log()  # no reply can come after this
    assert cluster.whatsapp.texts_for(CID) == ["ack:first", "ack:second"]


class Canary:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (open, (self.path, "w"))


@BROKERS
def test_pickle_payload_in_the_queue_is_refused(cluster: Cluster) -> None:
    w = cluster.start_worker("w1")
    canary = os.path.join(tempfile.mkdtemp(), "pwned")
    body = pickle.dumps((Canary(canary),))  # what a hostile producer would push
    task_id = str(uuid.uuid4())
    with Connection(cluster.broker_url) as conn:
        if cluster.broker == "rabbitmq":  # the queue must exist, or RabbitMQ drops the message unrouted
            from worker.queue.broker import quorum_queue

            quorum_queue()(conn.default_channel).declare()
        producer = conn.Producer()
        producer.publish(body, routing_key="parley", exchange="", content_type="application/x-python-serialize",
                         content_encoding="binary", serializer=None,
                         headers={"lang": "py", "task": "parley.drain", "id": task_id, "root_id": task_id,
                                  "argsrepr": "", "kwargsrepr": "", "origin": "attacker"})
    # The worker took the message and refused it (kombu's ContentDisallowed, logged): from then on it cannot run.
    assert wait_until(lambda: "untrusted content of type pickle" in w.log(), 30), w.log()
    assert not os.path.exists(canary)
    assert w.alive()
    cluster.client().send_message(CID, "still fine?", message_id="m1")
    assert wait_until(lambda: len(cluster.whatsapp.sent) >= 1, 30), w.log()
    assert not os.path.exists(canary)
