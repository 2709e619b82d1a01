"""A broker that refuses while the store's Redis is up: every way in queues the input, answers as queued, and goes
on; the failed wake-up is logged and counted (the sweeper wakes a worker later). A real refusal: the waker is
Celery's publish to a broker URL on a closed port of this machine."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kombu.connection import Connection
from kombu.messaging import Producer
from starlette.testclient import TestClient

from tests.support.rabbitmq import Vhost, rabbitmq_vhost
from tests.support.redis_server import RedisServer, free_port, redis_of_its_own
from worker import metrics
from worker.client import ConversationClient
from worker.client.async_client import AsyncClient
from worker.ingress.app import create_app
from worker.inlet.amqp import AmqpInlet, inlet_queue
from worker.inlet.stream import Inlet
from worker.queue.wakeup import CeleryWaker
from worker.service.timer_loop import TimerLoop
from worker.store.limits import StoreLimits
from worker.store.redis_store import ConversationStore

server = pytest.fixture(redis_of_its_own)
CID = "447700900123"
PRODUCER = {"Authorization": "Bearer game-token"}


def _failed() -> float:
    return float(metrics.WAKEUPS_FAILED._value.get())


def _refusing_client(server: RedisServer, prefix: str) -> ConversationClient:
    """A client whose store is up and whose broker (a Redis URL on a closed port) refuses every publish."""
    store = ConversationStore(server.client(), prefix=prefix, limits=StoreLimits())
    return ConversationClient(store, CeleryWaker(f"redis://127.0.0.1:{free_port()}/0"), max_text_chars=100)


def test_the_stream_inlet_queues_the_input_and_goes_on_when_the_wake_up_fails(server: RedisServer) -> None:
    client = _refusing_client(server, "s")
    r = server.client()
    inlet = Inlet(r, client, "parley:inlet", "g", "a", block_ms=1, retry_seconds=0)
    inlet.ensure_group()
    r.xadd("parley:inlet", {"envelope": json.dumps({"kind": "message", "conversation_id": CID, "text": "hi",
                                                     "message_id": "m1"})})
    before = _failed()
    assert inlet.step() == 1
    assert [m for m, _ in client.store.inbox(CID)] == ["m1"]
    assert int(r.xpending("parley:inlet", "g")["pending"]) == 0  # acknowledged: not accepted again
    assert _failed() == before + 1


@pytest.fixture
def vhost() -> Iterator[Vhost]:
    v = rabbitmq_vhost()
    yield v
    v.delete()


def test_the_amqp_inlet_thread_survives_a_failed_wake_up(vhost: Vhost, server: RedisServer) -> None:
    client = _refusing_client(server, "q")
    with Connection(vhost.url, transport_options={"confirm_publish": True}) as conn:  # type: ignore[no-untyped-call]
        channel = conn.channel()  # type: ignore[no-untyped-call]
        inlet_queue("parley.inlet")(channel).declare()  # type: ignore[no-untyped-call]
        producer = Producer(channel)  # type: ignore[no-untyped-call]
        for mid in ("q1", "q2"):
            producer.publish(json.dumps({"kind": "message", "conversation_id": CID, "text": mid,  # type: ignore[no-untyped-call]
                                         "message_id": mid}).encode(), routing_key="parley.inlet", delivery_mode=2)
    stop = False
    thread = threading.Thread(target=AmqpInlet(vhost.url, client, "parley.inlet", retry_seconds=0.05).run,
                              args=(lambda: stop,))
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while client.store.inbox_depth(CID) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert thread.is_alive(), "the consumer thread ended on a failed wake-up"
    finally:
        stop = True
        thread.join(10)
    assert [m for m, _ in client.store.inbox(CID)] == ["q1", "q2"]
    with Connection(vhost.url) as conn:  # type: ignore[no-untyped-call]
        assert conn.channel().queue_declare("parley.inlet", passive=True).message_count == 0  # type: ignore[no-untyped-call]


def _http(client: ConversationClient) -> TestClient:
    return TestClient(create_app(client, client.store, app_secret="s", verify_token="v", api_tokens="game-token"),
                      raise_server_exceptions=False)


@pytest.mark.parametrize("on_loop", [True, False], ids=["event loop", "worker thread"])
def test_the_api_answers_202_when_only_the_wake_up_fails(server: RedisServer, on_loop: bool,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    client = _refusing_client(server, "api")
    if not on_loop:
        monkeypatch.setattr(AsyncClient, "for_client", classmethod(lambda cls, c: None))
    else:
        assert AsyncClient.for_client(client) is not None
    http = _http(client)
    body: dict[str, Any] = {"text": "hi", "message_id": "m1"}
    r = http.post(f"/v1/conversations/{CID}/messages", headers=PRODUCER, json=body)
    assert r.status_code == 202, r.text
    assert [m for m, _ in client.store.inbox(CID)] == ["m1"]
    again = http.post(f"/v1/conversations/{CID}/messages", headers=PRODUCER, json=body)
    assert again.status_code == 202 and again.json()["duplicate"] is True


def test_the_client_and_the_timer_loop_go_on_when_the_wake_up_fails(server: RedisServer) -> None:
    client = _refusing_client(server, "t")
    before = _failed()
    assert not client.send_message(CID, "hi", message_id="m1").duplicate
    loop = TimerLoop(client.store, CeleryWaker(f"redis://127.0.0.1:{free_port()}/0"))
    client.send_event("447700900124", "nudge", message_id="t1", at=datetime.now(UTC) + timedelta(seconds=1))
    client.send_event("447700900125", "nudge", message_id="t2", at=datetime.now(UTC) + timedelta(seconds=1))
    time.sleep(1.1)
    assert loop.run_once() == 2  # both fired, though each wake-up failed
    assert client.store.inbox_depth("447700900124") == 1 and client.store.inbox_depth("447700900125") == 1
    assert _failed() == before + 3


def test_parley_inlet_keeps_consuming_the_stream_while_the_broker_refuses(server: RedisServer) -> None:
    import os
    import signal
    import subprocess
    import sys

    env = {**os.environ, "REDIS_URL": server.url, "PARLEY_BROKER_URL": f"redis://127.0.0.1:{free_port()}/0",
           "PARLEY_LOG_LEVEL": "WARNING"}
    proc = subprocess.Popen([sys.executable, "-m", "worker.cli", "inlet"], env=env)
    store = ConversationStore(server.client())
    try:
        for n, cid in enumerate((CID, "447700900124"), start=1):  # the second after the first one's wake-up failed
            server.client().xadd("parley:inlet", {"envelope": json.dumps(
                {"kind": "message", "conversation_id": cid, "text": "hi", "message_id": f"s{n}"})})
            deadline = time.monotonic() + 30
            while store.inbox_depth(cid) < 1 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.1)
            assert proc.poll() is None, "parley inlet ended on a failed wake-up"
            assert [m for m, _ in store.inbox(cid)] == [f"s{n}"]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
