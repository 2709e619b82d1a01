"""Wake-ups that producers send to the workers, by task name, without importing the Celery app in ``tasks/``.

A producer (a webhook handler, a game engine, ``parley replay``) only needs to publish a ``parley.drain`` or
``parley.deliver`` message; importing ``tasks`` would pull the worker's task modules, its signal handlers and
its settings into every producer process. This module builds a bare Celery client that publishes the same
message the workers' own ``apply_async`` does: msgpack only, on the workers' queue. ``tests/test_wakeup.py``
holds it to the task app's configuration, so the two cannot drift apart.

When the broker is the same plain ``redis://`` server and database as the store (the default), :class:`AcceptWake`
saves that publish: the accept script pushes the wake-up itself, in its own round trip, only when the input
needs one. The message is the one kombu's Redis transport would LPUSH for this waker's ``send_task``: captured once
from kombu and Celery themselves (their own code, run against a Redis client that only records), with the ids and the
conversation id made placeholders, so nothing of the format is written here by hand.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import threading
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import msgpack

from worker import metrics
from worker.envelopes.addresses import validate_conversation_id
from worker.queue.broker import QUEUE
from worker.settings import Settings
from worker.store.answers import WakePush

log = logging.getLogger(__name__)

DRAIN = "parley.drain"
DELIVER = "parley.deliver"

Waker = Callable[[str], None]
"""Called with a conversation id after an input or a reply was queued for it."""


def wake_after_accept(wake: Waker, conversation_id: str) -> bool:
    """Call ``wake`` for an input already accepted into its mailbox; False when the publish failed. Never raises:
    the input is queued, so a failed wake-up (a broker outage: kombu's ``OperationalError``, a refused connection, a
    timeout) must not fail the accept that queued it (a caller retrying without a message id would queue it twice)
    nor end the loop that made it. It is logged and counted (``parley_wakeups_failed_total``); the sweeper wakes a
    worker for the conversation once the broker is back. The one rule of every way in (the client's accepts, the HTTP
    API on both its paths, the inlets, the timer loop)."""
    try:
        wake(conversation_id)
    except Exception as exc:  # whatever the broker's client raises, the input is already queued
        metrics.WAKEUPS_FAILED.inc()
        log.error("wake-up of %s failed after its input was accepted; the sweeper will wake a worker: %r",
                  conversation_id, exc)
        return False
    return True


class CeleryWaker:
    """Publishes ``task(conversation_id)`` to the workers' queue through a broker connection pool of its own.

    ``conf``: the broker-dependent Celery settings (:func:`worker.queue.broker.broker_conf`), so the queue is declared
    exactly as the workers declare it (RabbitMQ refuses a quorum queue declared again as a classic one).
    """

    def __init__(self, broker_url: str, *, task: str = DRAIN, transport_options: dict[str, Any] | None = None,
                 pool_limit: int = 10, conf: dict[str, Any] | None = None) -> None:
        self.task = task
        self.app = producer_app(broker_url, transport_options=transport_options, pool_limit=pool_limit, conf=conf)

    def __call__(self, conversation_id: str) -> None:
        pool_ready(self.app)
        self.app.send_task(self.task, args=[conversation_id], queue=QUEUE, serializer="msgpack")


#: kombu keeps one registry of connection pools for the whole process, and the first use of a Celery app's pool
#: resizes every pool in it (``kombu.pools.set_limit``) while another thread may be adding its own: two producers'
#: first sends at once failed with "dictionary changed size during iteration", after their inputs were accepted.
_POOL_SETUP = threading.Lock()


def pool_ready(app: Any) -> None:
    """Make ``app``'s broker pools (connections, producers), if it has none yet, under the process's one lock: Celery
    makes them lazily on the first send (and again after a fork), each adding to kombu's registry; later sends take
    them without touching it."""
    # Celery's own lazy attributes: reading them is free, making them is what needs the lock.
    if app._pool is None or app.amqp._producer_pool is None:
        with _POOL_SETUP:
            app.amqp.producer_pool  # noqa: B018  (the property makes the producer pool and, first, the connections')


def producer_app(broker_url: str, *, transport_options: dict[str, Any] | None = None, pool_limit: int = 10,
                 conf: dict[str, Any] | None = None) -> Any:
    """The bare Celery app a producer publishes wake-ups with (no task modules): msgpack, the workers' queue, and
    ``conf`` (the broker-dependent settings) over that."""
    from celery import Celery

    app = Celery("parley-producer", broker=broker_url, set_as_current=False)
    settings: dict[str, Any] = {
        "task_serializer": "msgpack",
        "accept_content": ["msgpack"],
        "task_default_queue": QUEUE,
        "task_ignore_result": True,
        "broker_transport_options": transport_options or {},
        "broker_pool_limit": pool_limit,
        "broker_connection_retry_on_startup": True,
    }
    settings.update(conf or {})
    app.conf.update(settings)
    return app


def celery_waker(settings: Settings, task: str = DRAIN) -> CeleryWaker:
    """The default waker of :class:`~worker.client.ConversationClient`: the broker, queue declaration and transport
    options the workers use (a different visibility timeout on the same Redis would change when unacked messages
    return; a different queue declaration on RabbitMQ is refused)."""
    from worker.queue.broker import broker_conf

    conf = broker_conf(settings)
    return CeleryWaker(conf["broker_url"], task=task, conf=conf)


def wake_needed(*, accepted: bool, was_empty: bool, ended_hold: bool, every: bool = False) -> bool:
    """Whether inputs that just joined a mailbox need a worker woken: the one rule of every way in (the client's
    accepts, the timer loop's firing). Only the first input waiting needs one (``was_empty``): with more waiting, a
    wake-up is already queued, or a worker is draining (its commit hands the new input back atomically), or the head
    waits for its scheduled retry; the sweeper covers a worker that died. Fewer Celery tasks, same guarantees. An
    input that ended a burst's quiet period (``ended_hold``) wakes one too: the burst is answered now, then the input.
    ``every``: the producer does not coalesce wake-ups. accept.lua applies the same rule when it pushes the wake-up
    itself (:class:`AcceptWake`); tests/store/test_store_wake.py holds the two together."""
    return accepted and (was_empty or ended_hold or every)


# Placeholders the captured message carries where each wake-up has its own value (none can occur in the rest).
_TASK_ID = "@@parley-task-id@@"  # headers.id, headers.root_id, properties.correlation_id
_DELIVERY_TAG = "@@parley-delivery-tag@@"  # properties.delivery_tag
_CID = "@@parley-cid@@"  # the task's one argument: in the body and in headers.argsrepr
_BODY = "@@parley-body@@"  # the body as the transport encodes it (the cid is inside)
_SLOTS = re.compile(f"({'|'.join(map(re.escape, (_TASK_ID, _DELIVERY_TAG, _CID, _BODY)))})")


class _Recorder:
    """A Redis client that answers every command and keeps what is LPUSHed: kombu's Redis channel runs on it as it
    is (its connection check, the queue's declaration), so the message it would push is read without a server."""

    def __init__(self) -> None:
        self.pushed: list[tuple[str, bytes]] = []

    def lpush(self, key: str, *values: str | bytes) -> int:
        self.pushed.extend((key, v.encode() if isinstance(v, str) else v) for v in values)
        return len(self.pushed)

    def pipeline(self, *_: Any, **__: Any) -> _Recorder:
        return self

    def execute(self) -> list[Any]:
        return []

    def __enter__(self) -> _Recorder:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def __getattr__(self, name: str) -> Callable[..., _Recorder]:
        return lambda *_, **__: self


def capture(conf: dict[str, Any], task: str = DRAIN) -> tuple[str, bytes]:
    """The queue key and the message kombu's Redis transport LPUSHes for ``send_task(task, args=[cid])`` through a
    producer app with ``conf`` (:func:`worker.queue.broker.broker_conf`), with the placeholders for its ids and ``cid``."""
    from kombu.transport import redis as kombu_redis
    from kombu.utils.imports import symbol_by_name

    configured = symbol_by_name(conf.get("broker_transport") or kombu_redis.Transport)  # type: ignore[no-untyped-call]
    base = configured if issubclass(configured, kombu_redis.Transport) else kombu_redis.Transport
    recorder = _Recorder()

    class Channel(base.Channel):  # type: ignore[misc,name-defined]
        def _create_client(self, asynchronous: bool = False) -> _Recorder:
            return recorder

        def _next_delivery_tag(self) -> str:
            return _DELIVERY_TAG

    class Transport(base):  # type: ignore[misc,valid-type]
        pass

    Transport.Channel = Channel
    # The pool limit stays the producers' own: kombu's pool limit is one for the whole process, and an app with another
    # one resizes every pool in it on first use (shrinking the waker's pool, or failing a send using it).
    app = producer_app(conf["broker_url"], conf={**conf, "broker_transport": Transport})
    try:
        pool_ready(app)
        app.send_task(task, args=[_CID], queue=QUEUE, serializer="msgpack", task_id=_TASK_ID)
    finally:
        app.close()
    if len(recorder.pushed) != 1:
        raise RuntimeError(f"kombu pushed {len(recorder.pushed)} messages for one send_task")
    return recorder.pushed[0]


class AcceptWake:
    """The wake-up the accept script pushes itself (see the module): ``push(cid)`` is the :class:`WakePush` for one
    input, a message of its own (a new task id and delivery tag, as kombu and Celery make them: ``uuid4``).

    The template is captured from kombu on first use, once per process (after a fork, again: the message names its
    origin's pid), so a producer that never accepts (``parley pause``) never pays for it. When the captured message
    is not of the shape this substitutes into (a kombu or Celery that changed it), the failure is logged once and
    ``push`` answers None from then on: the producer's waker publishes through kombu as before.
    """

    def __init__(self, conf: dict[str, Any], *, task: str = DRAIN) -> None:
        self.conf, self.task = conf, task
        self._pid = -1
        self._failed = False
        self._queue, self._pieces, self._head, self._tail = "", [""], b"", b""

    def _template(self) -> bool:
        if self._pid != os.getpid() and not self._failed:
            try:
                queue, message = capture(self.conf, self.task)
                text, self._head, self._tail = _placeholders(message)
            except Exception:
                self._failed = True
                log.warning("the accept cannot push the wake-up itself; publishing it through kombu", exc_info=True)
                return False
            self._queue, self._pieces = queue, _SLOTS.split(text)
            self._pid = os.getpid()
        return not self._failed

    def _fill(self, conversation_id: str) -> bytes:
        """The message for ``conversation_id`` from the captured template (which the caller made sure of)."""
        cid = validate_conversation_id(conversation_id)
        values = {_BODY: base64.b64encode(self._head + msgpack.packb(cid) + self._tail).decode(), _CID: cid,
                  _TASK_ID: str(uuid.uuid4()), _DELIVERY_TAG: str(uuid.uuid4())}
        return "".join([values.get(piece, piece) for piece in self._pieces]).encode()

    def message(self, conversation_id: str) -> bytes:
        """The message for ``conversation_id`` (validated: it goes into the message unescaped, as JSON and repr
        would leave it). Raises :class:`RuntimeError` when no template could be captured."""
        if not self._template():
            raise RuntimeError("no wake-up template: kombu's message could not be captured (see the log)")
        return self._fill(conversation_id)

    @property
    def queue(self) -> str:
        """The broker's list the workers consume (the priority step kombu puts this message on); '' when no
        template could be captured."""
        self._template()
        return self._queue

    def push(self, conversation_id: str, *, every: bool = False) -> WakePush | None:
        """What the accept of an input of ``conversation_id`` is handed (``every``: wake-ups are not coalesced), or
        None when no template could be captured (the caller's waker publishes then)."""
        if not self._template():
            return None
        return WakePush(self._queue, self._fill(conversation_id), every)


def _placeholders(message: bytes) -> tuple[str, bytes, bytes]:
    """The captured message as a template: its text with the body a placeholder, and the body's raw bytes before and
    after the encoded cid. Checks that each placeholder sits where this substitutes it, and nowhere else."""
    import json

    text = message.decode()
    payload = json.loads(text)
    properties = payload["properties"]
    encoded = payload["body"]
    if properties.get("body_encoding") != "base64" or payload.get("content-type") != "application/x-msgpack":
        raise RuntimeError(f"unexpected body encoding in {text[:200]!r}")
    raw = base64.b64decode(encoded)
    token = msgpack.packb(_CID)
    if raw.count(token) != 1 or text.count(encoded) != 1:
        raise RuntimeError("the cid is not in the body once")
    head, tail = raw.split(token)
    text = text.replace(encoded, _BODY)
    counts = {p: text.count(p) for p in (_BODY, _CID, _TASK_ID, _DELIVERY_TAG)}
    if counts != {_BODY: 1, _CID: 1, _TASK_ID: 3, _DELIVERY_TAG: 1}:
        raise RuntimeError(f"unexpected placeholders in the captured message: {counts}")
    return text, head, tail


def same_redis(store_url: str, broker_url: str) -> bool:
    """Whether ``broker_url`` names the same plain ``redis://`` server and database as ``store_url`` (same host,
    port, database and credentials; TLS, Unix sockets, Sentinel and other brokers are never the same)."""
    from redis.connection import parse_url

    if urlsplit(store_url).scheme != "redis" or urlsplit(broker_url).scheme != "redis":
        return False

    def where(url: str) -> tuple[Any, ...]:
        p = parse_url(url)  # type: ignore[no-untyped-call]
        return (p.get("host", "localhost"), int(p.get("port", 6379)), int(p.get("db", 0)), p.get("username"),
                p.get("password"))

    try:
        return where(store_url) == where(broker_url)
    except ValueError:
        return False


def accept_wake(settings: Settings, task: str = DRAIN) -> AcceptWake | None:
    """The accept's own wake-up for a producer of ``settings``, or None where the wake-up is published through kombu:
    ``PARLEY_BROKER_WAKE_IN_ACCEPT`` off, a Redis Cluster store (the queue is in another slot), a broker that is not
    the store's Redis server and database over plain ``redis://`` (and, at its first use, a kombu whose message could
    not be captured: :class:`AcceptWake`)."""
    from worker.queue.broker import broker_conf

    if not settings.broker.wake_in_accept or settings.redis.cluster:
        return None
    if not same_redis(settings.redis.effective_url(), settings.effective_broker_url()):
        return None
    return AcceptWake(broker_conf(settings), task=task)
