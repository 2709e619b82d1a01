"""Wake-ups that producers send to the workers, by task name, without importing the Celery app in ``tasks/``.

A producer (a webhook handler, a game engine, ``parley replay``) only needs to publish a ``parley.drain`` or
``parley.deliver`` message; importing ``tasks`` would pull the worker's task modules, its signal handlers and
its settings into every producer process. This module builds a bare Celery client that publishes the same
message the workers' own ``apply_async`` does: msgpack only, on the workers' queue. ``tests/test_wakeup.py``
holds it to the task app's configuration, so the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from worker.broker import QUEUE
from worker.settings import Settings

DRAIN = "parley.drain"
DELIVER = "parley.deliver"

Waker = Callable[[str], None]
"""Called with a conversation id after an input or a reply was queued for it."""


class CeleryWaker:
    """Publishes ``task(conversation_id)`` to the workers' queue through a broker connection pool of its own.

    ``conf``: the broker-dependent Celery settings (:func:`worker.broker.broker_conf`), so the queue is declared
    exactly as the workers declare it (RabbitMQ refuses a quorum queue declared again as a classic one).
    """

    def __init__(self, broker_url: str, *, task: str = DRAIN, transport_options: dict[str, Any] | None = None,
                 pool_limit: int = 10, conf: dict[str, Any] | None = None) -> None:
        from celery import Celery

        self.task = task
        self.app = Celery("parley-producer", broker=broker_url, set_as_current=False)
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
        self.app.conf.update(settings)

    def __call__(self, conversation_id: str) -> None:
        self.app.send_task(self.task, args=[conversation_id], queue=QUEUE, serializer="msgpack")


def celery_waker(settings: Settings, task: str = DRAIN) -> CeleryWaker:
    """The default waker of :class:`~worker.client.ConversationClient`: the broker, queue declaration and transport
    options the workers use (a different visibility timeout on the same Redis would change when unacked messages
    return; a different queue declaration on RabbitMQ is refused)."""
    from worker.broker import broker_conf

    conf = broker_conf(settings)
    return CeleryWaker(conf["broker_url"], task=task, conf=conf)
