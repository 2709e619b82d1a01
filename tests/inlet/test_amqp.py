"""The RabbitMQ inlet against the machine's RabbitMQ (a vhost of the test's own) and a real Redis of its own: inputs
accepted in queue order and acknowledged, a redelivered body a duplicate, what cannot be accepted moved to
<queue>.dead with its reason, a full mailbox holding the queue until there is room."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kombu.connection import Connection
from kombu.messaging import Producer

from tests.support.rabbitmq import Vhost, rabbitmq_vhost
from tests.support.redis_server import RedisServer, redis_of_its_own
from worker.client import ConversationClient
from worker.envelopes.inputs import decode_envelope
from worker.inlet.amqp import AmqpInlet, dead_queue, inlet_queue
from worker.store.limits import StoreLimits
from worker.store.redis_store import ConversationStore

server = pytest.fixture(redis_of_its_own)
QUEUE = "parley.inlet"


@pytest.fixture
def vhost() -> Iterator[Vhost]:
    v = rabbitmq_vhost()
    yield v
    v.delete()


def _publish(url: str, *bodies: Any) -> None:
    # Publisher confirms, as a game engine's producer should use: each publish returns once RabbitMQ has the message
    # in the quorum queue, so the test starts the inlet on a queue that holds all of them.
    with Connection(url, transport_options={"confirm_publish": True}) as conn:  # type: ignore[no-untyped-call]
        channel = conn.channel()  # type: ignore[no-untyped-call]
        inlet_queue(QUEUE)(channel).declare()  # type: ignore[no-untyped-call]
        producer = Producer(channel)  # type: ignore[no-untyped-call]
        for body in bodies:
            raw = body if isinstance(body, str) else json.dumps(body)
            producer.publish(raw.encode(), routing_key=QUEUE, content_type="application/json",  # type: ignore[no-untyped-call]
                             content_encoding="utf-8", delivery_mode=2)


def _dead(url: str) -> list[tuple[bytes, str]]:
    out = []
    with Connection(url) as conn:  # type: ignore[no-untyped-call]
        channel = conn.channel()  # type: ignore[no-untyped-call]
        q = dead_queue(QUEUE)(channel)
        q.declare()  # type: ignore[no-untyped-call]
        while (m := q.get(no_ack=True)) is not None:  # type: ignore[no-untyped-call]
            out.append((m.body, m.headers["reason"]))
    return out


def _ready(url: str) -> int:
    """How many messages the inlet queue holds that no consumer has been given (for a failure's message)."""
    with Connection(url) as conn:  # type: ignore[no-untyped-call]
        channel = conn.channel()  # type: ignore[no-untyped-call]
        return int(channel.queue_declare(QUEUE, passive=True).message_count)


class Running:
    def __init__(self, url: str, client: ConversationClient, retry_seconds: float = 0.05) -> None:
        self.stop = False
        self.thread = threading.Thread(target=AmqpInlet(url, client, QUEUE, retry_seconds=retry_seconds).run,
                                       args=(lambda: self.stop,))
        self.thread.start()

    def until(self, done: Any, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            time.sleep(0.05)

    def close(self, within: float = 10) -> None:
        self.stop = True
        self.thread.join(within)
        assert not self.thread.is_alive(), f"the inlet did not stop within {within} s of being asked"


def test_queue_messages_are_accepted_in_order_and_bad_ones_moved_aside(vhost: Vhost, server: RedisServer,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="parley.inlet")
    store = ConversationStore(server.client(), prefix="q")
    client = ConversationClient(store, wake=lambda cid: None)
    event = {"kind": "event", "conversation_id": "c1", "text": "tagged"}  # no message id: a digest of the body
    _publish(vhost.url, event, {"kind": "message", "conversation_id": "c1", "text": "where?", "message_id": "m1"},
             "{not json", {"kind": "event", "conversation_id": "c1", "text": "x", "colour": "red"}, event,
             {"kind": "reset", "conversation_id": "c1", "message_id": "r1"})
    running = Running(vhost.url, client)
    try:
        running.until(lambda: store.inbox_depth("c1") >= 3)
        time.sleep(0.3)
    finally:
        running.close()
    inbox = [(decode_envelope(p).kind, decode_envelope(p).text) for _, p in store.inbox("c1")]
    # the second "tagged": a duplicate
    assert inbox == [("event", "tagged"), ("message", "where?"), ("reset", None)], (
        f"still in the queue: {_ready(vhost.url)}; the inlet said: {[r.getMessage() for r in caplog.records]}")
    dead = _dead(vhost.url)
    assert [(body, reason.split(":")[0]) for body, reason in dead] == [
        (b"{not json", "not JSON"), (json.dumps({"kind": "event", "conversation_id": "c1", "text": "x",
                                                 "colour": "red"}).encode(), "colour")]


def test_a_full_mailbox_holds_the_queue_until_there_is_room(vhost: Vhost, server: RedisServer) -> None:
    r = server.client()
    store = ConversationStore(r, prefix="q", limits=StoreLimits(max_inbox=1))
    client = ConversationClient(store, wake=lambda cid: None)
    _publish(vhost.url, *({"kind": "event", "conversation_id": "c1", "text": f"e{i}", "message_id": f"e{i}"}
                          for i in range(3)))
    running = Running(vhost.url, client)
    try:
        for expected in ("e0", "e1", "e2"):
            running.until(lambda e=expected: [m for m, _ in store.inbox("c1")] == [e])  # type: ignore[misc]
            assert [m for m, _ in store.inbox("c1")] == [expected]
            r.delete(store.keys("c1").inbox)  # a worker applied it
    finally:
        running.close()
    assert _dead(vhost.url) == []


def test_a_held_queue_stops_when_asked_without_waiting_out_its_backoff(vhost: Vhost, server: RedisServer) -> None:
    r = server.client()
    store = ConversationStore(r, prefix="q", limits=StoreLimits(max_inbox=1))
    client = ConversationClient(store, wake=lambda cid: None)
    client.send_event("c1", "already waiting", message_id="e0")
    _publish(vhost.url, {"kind": "event", "conversation_id": "c1", "text": "e1", "message_id": "e1"})
    running = Running(vhost.url, client, retry_seconds=30)  # the mailbox is full: the queue waits 30 s, then 60...
    try:
        running.until(lambda: _ready(vhost.url) == 0)  # the inlet holds the message
        time.sleep(0.5)
    finally:
        running.close(within=5)  # a SIGTERM's stop, not the backoff's end
    assert [m for m, _ in store.inbox("c1")] == ["e0"]
    r.delete(store.keys("c1").inbox)
    running = Running(vhost.url, client)  # not acknowledged: delivered again to the next consumer
    try:
        running.until(lambda: [m for m, _ in store.inbox("c1")] == ["e1"])
    finally:
        running.close()
    assert [m for m, _ in store.inbox("c1")] == ["e1"]


def test_parley_inlet_consumes_the_queue_when_the_broker_is_rabbitmq(vhost: Vhost, server: RedisServer) -> None:
    import os
    import signal
    import subprocess
    import sys

    env = {**os.environ, "REDIS_URL": server.url, "PARLEY_BROKER_URL": vhost.url, "PARLEY_LOG_LEVEL": "WARNING"}
    proc = subprocess.Popen([sys.executable, "-m", "worker.cli", "inlet"], env=env)
    store = ConversationStore(server.client())
    try:
        _publish(vhost.url, {"kind": "event", "conversation_id": "c9", "text": "from the queue", "message_id": "q1"})
        server.client().xadd("parley:inlet", {"envelope": json.dumps(
            {"kind": "event", "conversation_id": "c8", "text": "from the stream", "message_id": "s1"})})
        deadline = time.monotonic() + 30
        while (store.inbox_depth("c9") < 1 or store.inbox_depth("c8") < 1) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    assert [m for m, _ in store.inbox("c9")] == ["q1"] and [m for m, _ in store.inbox("c8")] == ["s1"]
