"""The Celery app: msgpack only, late acks, prefetch 1, time limits, visibility timeout above them.

``celery -A tasks worker --pool gevent --concurrency 1000`` runs a worker (see the Procfile and the README's
"Pool" for why: a turn waiting on the model holds no CPU, and greenlets switch far more cheaply than threads
fighting over the GIL). ``--pool threads`` works too.
"""

from __future__ import annotations

from typing import Any

from celery import Celery, signals

from worker.settings import Settings, get_settings

QUEUE = "parley"


def make_app(settings: Settings | None = None) -> Celery:
    """A Celery app configured for Parley (producers use it to send wake-ups, workers to run tasks)."""
    s = settings or get_settings()
    app = Celery("parley", broker=s.effective_broker_url(), include=["tasks.conversation"])
    hard = s.task_time_limit
    app.conf.update(
        # No pickle anywhere: a pickle payload pushed into the queue is refused, never loaded.
        task_serializer="msgpack",
        result_serializer="msgpack",
        accept_content=["msgpack"],
        result_accept_content=["msgpack"],
        task_ignore_result=True,
        result_backend=None,
        # At-least-once: ack after the task ran; a killed worker's message comes back.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_time_limit=hard,
        task_soft_time_limit=max(1.0, hard - 30),
        # Keep it above the hard time limit (the defaults do): a message whose task outlives it is redelivered
        # while the first copy still runs. Parley stays correct then (the lease turns the copy away), but it
        # is wasted work.
        broker_transport_options={"visibility_timeout": s.visibility_timeout,
                                  "unacked_restore_interval": s.broker_restore_interval,
                                  "unacked_restore_throttle": s.broker_restore_throttle,
                                  # Every pool thread publishes wake-ups and acks its own message: with kombu's
                                  # default of 10 connections a busy worker fails both ("Too many connections").
                                  "max_connections": s.broker_max_connections},
        broker_pool_limit=min(s.broker_max_connections, 100),
        broker_connection_retry_on_startup=True,
        task_default_queue=QUEUE,
        worker_hijack_root_logger=False,
        worker_send_task_events=s.task_events,
        worker_enable_remote_control=s.remote_control,
        task_send_sent_event=False,
    )
    return app


@signals.setup_logging.connect
def _setup_logging(**_: Any) -> None:
    """Workers log through Parley's formatter (JSON with PARLEY_LOG_JSON), extra fields included."""
    from worker.logs import configure_logging

    configure_logging(get_settings())
