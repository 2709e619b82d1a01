"""The broker's configuration, in one place for the workers' app (``tasks.app``) and the producers' waker.

Two brokers are supported, and they need different settings:

- Redis (the default: ``REDIS_URL``, or ``PARLEY_BROKER_URL=redis://...``): kombu's Redis transport keeps
  unacknowledged messages in a sorted set and hands them back after ``visibility_timeout``; the restore scan and
  the connection pool size are Redis transport options.
- RabbitMQ (``PARLEY_BROKER_URL=amqp://...``): the ``parley`` queue is a *quorum* queue (replicated by Raft across
  a RabbitMQ cluster, so a lost broker node loses no wake-up), publishes wait for the broker's confirm
  (``confirm_publish``: a wake-up the producer was told is sent is on disk), and the worker detects the quorum queue
  so Celery uses per-consumer QoS (quorum queues have no global QoS) and RabbitMQ's native delayed delivery for
  countdowns. A killed worker's unacknowledged messages come back as soon as its connection closes, not after a
  visibility timeout. The Redis-only options are not passed (kombu's amqp transport would ignore or reject them).

Both publisher and worker must declare the queue with the same arguments: RabbitMQ refuses a second declaration
that differs (``PRECONDITION_FAILED``), which is also what an existing classic ``parley`` queue does to an upgrade.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from worker.queue import sentinel
from worker.settings import Settings

QUEUE = "parley"
"""The queue the workers consume."""

AMQP_SCHEMES = ("amqp", "amqps", "pyamqp")


def is_amqp(url: str) -> bool:
    """Whether ``url`` names a RabbitMQ (AMQP 0-9-1) broker."""
    return urlsplit(url).scheme in AMQP_SCHEMES


def quorum_queue() -> Any:
    """The workers' queue as RabbitMQ declares it (durable, quorum)."""
    from kombu.entity import Queue

    return Queue(QUEUE, routing_key=QUEUE, durable=True,  # type: ignore[no-untyped-call]
                 queue_arguments={"x-queue-type": "quorum"})


def broker_conf(settings: Settings, *, pool_limit: int | None = None) -> dict[str, Any]:
    """The Celery configuration entries that depend on the broker (workers and producers apply the same)."""
    url = settings.effective_broker_url()
    limit = pool_limit if pool_limit is not None else min(settings.broker.max_connections, 100)
    conf: dict[str, Any] = {"broker_url": url, "broker_pool_limit": limit, "task_default_queue": QUEUE,
                            "broker_connection_retry_on_startup": True}
    if is_amqp(url):
        conf.update(
            broker_transport_options={"confirm_publish": True},
            task_queues=(quorum_queue(),),
            task_create_missing_queues=False,
            worker_detect_quorum_queues=True,
        )
    else:
        if sentinel.is_sentinel(url):  # kombu's own sentinel form, derived from the one Parley URL
            conf["broker_url"], master = sentinel.kombu_url(url)
            transport_extra: dict[str, Any] = {"master_name": settings.broker.sentinel_master or master}
        else:
            transport_extra = {}
        if urlsplit(url).scheme == "redis" and settings.broker.fetch_batch:
            # A batch of wake-ups per round trip when the worker has free slots (worker.queue.redis_transport says how).
            conf["broker_transport"] = "worker.queue.redis_transport:Transport"
            transport_extra["fetch_batch"] = settings.broker.fetch_batch
        conf["broker_transport_options"] = {
            **transport_extra,
            # Above the hard time limit (the defaults are): a message whose task outlives it is redelivered while
            # the first copy still runs. Parley stays correct then (the lease turns the copy away): wasted work.
            "visibility_timeout": settings.broker.visibility_timeout,
            "unacked_restore_interval": settings.broker.restore_interval,
            "unacked_restore_throttle": settings.broker.restore_throttle,
            # Every pool thread publishes wake-ups and acks its own message: with kombu's default of 10
            # connections a busy worker fails both ("Too many connections").
            "max_connections": settings.broker.max_connections,
        }
    return conf


def check_broker(settings: Settings, timeout: float = 5.0) -> None:
    """Connect to the broker and, on RabbitMQ, look the workers' queue up without declaring it (``parley health``).

    Raises :class:`~worker.errors.ConfigurationError` when the broker does not answer or refuses the login.
    """
    from kombu.connection import Connection

    from worker.errors import ConfigurationError

    url = settings.effective_broker_url()
    try:
        with Connection(url, connect_timeout=timeout,  # type: ignore[no-untyped-call]
                        transport_options={"max_retries": 0}) as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout)
            if is_amqp(url):
                # Passive: a missing queue (no worker has started yet) is reported, never created as a classic one.
                conn.default_channel.queue_declare(QUEUE, passive=True)
    except Exception as exc:
        raise ConfigurationError(f"broker {conn_label(url)} is unavailable: {type(exc).__name__}: {exc}") from exc


def conn_label(url: str) -> str:
    """``url`` without its password, for messages."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{':' + str(parts.port) if parts.port else ''}{parts.path}"
