"""The producers' waker publishes exactly what the workers consume, without importing the Celery app."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import kombu
import msgpack
import pytest

from worker.queue.wakeup import DELIVER, DRAIN, QUEUE, CeleryWaker, accept_wake, celery_waker
from worker.settings import Settings


def test_the_waker_matches_the_task_apps_queue_serialiser_and_transport() -> None:
    from tasks.app import QUEUE as TASKS_QUEUE
    from tasks.app import make_app

    s = Settings(_env_file=None, redis_url="redis://127.0.0.1:1/0", visibility_timeout=1234.0)  # type: ignore[call-arg]
    app, waker = make_app(s), celery_waker(s)
    assert QUEUE == TASKS_QUEUE == app.conf.task_default_queue
    assert waker.app.conf.broker_url == app.conf.broker_url
    for key, value in waker.app.conf.broker_transport_options.items():
        assert app.conf.broker_transport_options[key] == value
    assert waker.app.conf.task_serializer == app.conf.task_serializer == "msgpack"
    import tasks.conversation  # noqa: F401  (registers the tasks)

    assert {DRAIN, DELIVER} <= set(app.tasks)


@pytest.mark.parametrize("task", [DRAIN, DELIVER])
def test_a_wake_up_is_a_msgpack_task_message_on_the_workers_queue(task: str) -> None:
    broker = f"memory://wake-{uuid.uuid4().hex[:8]}"
    CeleryWaker(broker, task=task)("447700900123")
    with kombu.Connection(broker) as conn:
        message = conn.SimpleQueue(QUEUE, accept=["msgpack"]).get(timeout=2)
        assert message.headers["task"] == task
        assert message.content_type == "application/x-msgpack"
        args, kwargs, _ = msgpack.unpackb(message.body, raw=False)
        assert args == ["447700900123"] and kwargs == {}
        assert message.delivery_info["routing_key"] == QUEUE
        message.ack()


def test_importing_the_client_and_waking_does_not_import_the_task_app() -> None:
    code = ("import sys, uuid\n"
            "from worker.client import ConversationClient\n"
            "from worker.queue.wakeup import CeleryWaker\n"
            "CeleryWaker(f'memory://{uuid.uuid4().hex}')('c1')\n"
            "assert not [m for m in sys.modules if m == 'tasks' or m.startswith('tasks.')], sorted(sys.modules)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# --- the accept's own wake-up (issue 33) ----------------------------------------------------------------------------

CID = "447700900123"
OTHER = "US.13491208655302741918"  # a business-scoped id: the other characters a cid may hold


def _ids(message: bytes) -> list[str]:
    """The values each wake-up has of its own: the task id (also the root id and the correlation id), the delivery
    tag, and the reply_to of the publishing app's thread (Celery's oid; unused, results are ignored)."""
    payload = json.loads(message)
    return [payload["headers"]["id"], payload["properties"]["delivery_tag"], payload["properties"]["reply_to"]]


def _modulo_ids(message: bytes, like: bytes) -> bytes:
    """``message`` with its own ids replaced by ``like``'s: equal bytes then mean equal messages but for the ids."""
    text = message.decode()
    for mine, theirs in zip(_ids(message), _ids(like), strict=True):
        text = text.replace(mine, theirs)
    return text.encode()


def test_the_accepts_wake_up_is_byte_for_byte_what_kombu_pushes_for_the_workers_app() -> None:
    import redis

    from tasks.app import make_app
    from tests.support.redis_server import start_redis
    from worker.client import ConversationClient

    server = start_redis()
    try:
        s = Settings(_env_file=None, redis_url=server.url)  # type: ignore[call-arg]
        r = redis.Redis.from_url(server.url)
        # What kombu's Redis transport LPUSHes for the workers' own task app (their transport and its options).
        app = make_app(s)
        for cid in (CID, OTHER):
            app.send_task(DRAIN, args=[cid], queue=QUEUE, serializer="msgpack")
        kombu_first, kombu_other = reversed(r.lrange(QUEUE, 0, -1))
        r.delete(QUEUE)
        client = ConversationClient._from_settings(s)
        published: list[str] = []
        client._wake = published.append  # the kombu publish, were it called
        client.send_message(CID, "hi", message_id="m1")
        client.send_message(CID, "again", message_id="m2")  # waiting behind the first: no wake-up
        client.send_message(OTHER, "hi", message_id="m3")
        first, other = reversed(r.lrange(QUEUE, 0, -1))
        assert published == []
        assert first != kombu_first and _modulo_ids(first, kombu_first) == kombu_first
        assert _modulo_ids(other, kombu_other) == kombu_other
        # Each wake-up has ids of its own (the task's id; the delivery tag, which keys kombu's unacked index).
        assert len({*_ids(first)[:2], *_ids(other)[:2], *_ids(kombu_first)[:2]}) == 6
        with kombu.Connection(server.url) as conn:  # kombu's consumer reads it as its own
            message = conn.SimpleQueue(QUEUE, accept=["msgpack"]).get(timeout=2)
            assert (message.headers["task"], message.headers["argsrepr"]) == (DRAIN, f"['{CID}']")
            assert msgpack.unpackb(message.body, raw=False)[:2] == [[CID], {}]
            message.ack()
    finally:
        server.stop()


def test_each_wake_up_has_ids_as_uuid4_makes_them() -> None:
    """The accept's wake-up makes its task id and delivery tag itself (``uuid.UUID`` was most of its cost): each is
    what ``str(uuid.uuid4())`` gives, version 4 of the RFC 4122 variant, and none repeats."""
    wake = accept_wake(Settings(_env_file=None, redis_url="redis://127.0.0.1:7001/0"))  # type: ignore[call-arg]
    assert wake is not None
    seen: set[str] = set()
    for _ in range(500):
        push = wake.push(CID)
        assert push is not None
        task_id, delivery_tag = _ids(push.message)[:2]
        for value in (task_id, delivery_tag):
            parsed = uuid.UUID(value)
            assert (str(parsed), parsed.version, parsed.variant) == (value, 4, uuid.RFC_4122)
        seen.update((task_id, delivery_tag))
    assert len(seen) == 1000


@pytest.mark.parametrize(("values", "pushed"), [
    ({}, True),
    ({"broker_url": "redis://127.0.0.1:7001"}, True),  # the same server and database, written differently
    ({"broker_wake_in_accept": False}, False),
    ({"redis_cluster": True}, False),
    ({"broker_url": "redis://127.0.0.1:7001/1"}, False),  # another database
    ({"broker_url": "redis://127.0.0.1:7002/0"}, False),  # another server
    ({"broker_url": "rediss://127.0.0.1:7001/0"}, False),
    ({"broker_url": "redis+sentinel://h1:26379/mymaster/0"}, False),
    ({"broker_url": "amqp://guest:guest@127.0.0.1:5672//"}, False),
])
def test_the_accept_pushes_the_wake_up_only_on_the_stores_own_plain_redis(values: dict[str, object],
                                                                           pushed: bool) -> None:
    s = Settings(_env_file=None, redis_url="redis://127.0.0.1:7001/0", **values)  # type: ignore[call-arg]
    assert (accept_wake(s) is not None) is pushed


def test_a_message_that_cannot_be_captured_leaves_the_wake_up_to_kombu(monkeypatch: pytest.MonkeyPatch,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    import fakeredis

    import worker.queue.wakeup as wakeup
    from worker.client import ConversationClient
    from worker.store.redis_store import ConversationStore

    def changed(conf: dict[str, object], task: str = DRAIN) -> tuple[str, bytes]:
        return QUEUE, b'{"body": "", "properties": {"body_encoding": "utf-8"}}'  # a shape this does not fill in

    monkeypatch.setattr(wakeup, "capture", changed)
    wake = accept_wake(Settings(_env_file=None, redis_url="redis://127.0.0.1:7001/0"))  # type: ignore[call-arg]
    assert wake is not None
    published: list[str] = []
    client = ConversationClient(ConversationStore(fakeredis.FakeRedis(), prefix="p"), published.append,
                                accept_wake=wake)
    client.send_message(CID, "hi", message_id="m1")
    client.send_message(OTHER, "hi", message_id="m2")
    assert published == [CID, OTHER]
    assert wake.push(CID) is None
    assert sum("publishing it through kombu" in r.getMessage() for r in caplog.records) == 1  # logged once


def test_a_producers_first_accept_and_send_from_many_threads_at_once_fail_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """What each producer thread does first (the HTTP API's threads, a game engine's): capture the accept's wake-up
    template, then publish a wake-up. kombu's pool limit is one for the whole process, and a first use with another
    limit resizes every pool of the process while other threads use or add theirs ("dictionary changed size during
    iteration", "Can't shrink pool when in use"). The window is widened here by a pause inside kombu's resize."""
    import threading
    import time

    from kombu.resource import Resource

    from worker.queue.wakeup import capture

    real_resize = Resource.resize  # every kombu pool (connections, producers) is a Resource

    def slow_resize(self: Resource, *args: object, **kwargs: object) -> object:
        time.sleep(0.002)
        return real_resize(self, *args, **kwargs)

    monkeypatch.setattr(Resource, "resize", slow_resize)
    limit = 13
    conf = {"broker_url": "redis://127.0.0.1:1/0", "broker_pool_limit": limit}  # never connected: capture records
    wakers = [CeleryWaker(f"memory://race-{uuid.uuid4().hex}", pool_limit=limit) for _ in range(16)]
    errors: list[BaseException] = []
    start = threading.Barrier(len(wakers))

    def first_accept_and_send(waker: CeleryWaker) -> None:
        start.wait()
        try:
            capture(conf)
            waker("c1")
        except BaseException as exc:  # the failures under test are RuntimeErrors out of kombu
            errors.append(exc)

    threads = [threading.Thread(target=first_accept_and_send, args=(w,)) for w in wakers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert {w.app.pool.limit for w in wakers} == {limit}  # no capture shrank a waker's pool
