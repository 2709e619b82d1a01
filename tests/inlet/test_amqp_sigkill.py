"""`parley inlet` processes (real subprocesses) consuming a durable RabbitMQ queue (the machine's RabbitMQ, a vhost
and a queue name of the test's own) into a real Redis: the active consumer is SIGKILLed while messages are in
flight, RabbitMQ hands the queue to the standby with the unacknowledged message first, and every message reaches its
conversation's mailbox once (a redelivered message is a duplicate by its message id, given or the body's digest)
and in queue order."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from kombu.connection import Connection
from kombu.messaging import Producer

from tests.support.inlet_processes import assert_each_once_in_order, start_inlet, stop_inlets
from tests.support.rabbitmq import Vhost, rabbitmq_vhost
from tests.support.redis_server import RedisServer, redis_of_its_own
from worker.inlet.amqp import dead_queue, inlet_queue
from worker.store.redis_store import ConversationStore

server = pytest.fixture(redis_of_its_own)
# Many conversations, few inputs each: the first input of a conversation wakes a worker (a publish to RabbitMQ)
# between its accept and its acknowledgement, which widens the window a SIGKILL must hit to leave an accepted
# message unacknowledged (its redelivery must then be a duplicate).
CONVERSATIONS, PER_CONVERSATION = 100, 3


@pytest.fixture
def vhost() -> Iterator[Vhost]:
    v = rabbitmq_vhost()
    yield v
    v.delete()


def _declare(url: str, queue: str) -> None:
    with Connection(url) as conn:  # type: ignore[no-untyped-call]
        inlet_queue(queue)(conn.channel()).declare()  # type: ignore[no-untyped-call]


def _publish_all(url: str, queue: str) -> None:
    # Publisher confirms, as docs/producers.md asks of a producer: unconfirmed, a burst's tail can be lost between
    # this connection's close and the quorum queue, which is a test's fault, not the inlet's.
    with Connection(url, transport_options={"confirm_publish": True}) as conn:  # type: ignore[no-untyped-call]
        producer = Producer(conn.channel())  # type: ignore[no-untyped-call]
        for i in range(PER_CONVERSATION):
            for c in range(CONVERSATIONS):
                body = {"kind": "event", "conversation_id": f"c{c}", "text": f"{i}"}
                if i % 2:
                    body["message_id"] = f"c{c}-{i}"  # the other half: the digest of the body
                producer.publish(json.dumps(body).encode(), routing_key=queue,  # type: ignore[no-untyped-call]
                                 content_type="application/json", content_encoding="utf-8", delivery_mode=2)


def _consumers(vhost: Vhost, queue: str) -> list[str]:
    """The activity status of each consumer of ``queue`` (``single_active`` or ``waiting``), from rabbitmqctl: the
    queue's own consumer count leaves out a waiting one."""
    out = subprocess.run(["rabbitmqctl", "-q", "list_consumers", "-p", vhost.name, "--no-table-headers",
                          "queue_name", "activity_status"], check=True, capture_output=True, text=True, timeout=60)
    return sorted(line.split()[1] for line in out.stdout.splitlines() if line.split()[:1] == [queue])


def _wait(condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def _queue_depths(url: str, queue: str) -> tuple[int, int]:
    """Messages ready or unacknowledged in the queue, and in its dead-letter queue."""
    with Connection(url) as conn:  # type: ignore[no-untyped-call]
        channel = conn.channel()  # type: ignore[no-untyped-call]
        q = inlet_queue(queue)(channel)
        _, ready, _ = q.queue_declare(passive=True)  # type: ignore[no-untyped-call]
        d = dead_queue(queue)(channel)
        _, dead, _ = d.queue_declare(passive=True)  # type: ignore[no-untyped-call]
        return int(ready), int(dead)


def test_a_sigkilled_amqp_inlet_loses_and_duplicates_nothing(vhost: Vhost, server: RedisServer) -> None:
    queue = f"parley.inlet.test-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "REDIS_URL": server.url, "PARLEY_BROKER_URL": vhost.url, "PARLEY_INLET_QUEUE": queue,
           "PARLEY_LOG_LEVEL": "WARNING"}
    _declare(vhost.url, queue)
    r = server.client()
    store = ConversationStore(r)
    total = CONVERSATIONS * PER_CONVERSATION

    def accepted() -> int:
        return sum(store.inbox_depth(f"c{c}") for c in range(CONVERSATIONS))

    active = start_inlet(env, "inlet-active")
    procs = [active]
    try:
        _wait(lambda: _consumers(vhost, queue) == ["single_active"], 60)
        procs.append(start_inlet(env, "inlet-standby"))  # subscribed second: the single active consumer's standby
        _wait(lambda: _consumers(vhost, queue) == ["single_active", "waiting"], 60)
        _publish_all(vhost.url, queue)
        _wait(lambda: accepted() >= CONVERSATIONS // 2, 60)  # among the first inputs, those that wake a worker
        active.send_signal(signal.SIGKILL)  # one message in flight: accepted or not, it was never acknowledged
        active.wait(10)
        assert 0 < accepted() < total, "the SIGKILL landed while messages were still in the queue"
        _wait(lambda: accepted() >= total and _queue_depths(vhost.url, queue)[0] == 0, 90)
        time.sleep(1.0)  # a doubled input would land now
    finally:
        stop_inlets(procs)
    assert_each_once_in_order(store, CONVERSATIONS, PER_CONVERSATION)
    assert _queue_depths(vhost.url, queue) == (0, 0)
