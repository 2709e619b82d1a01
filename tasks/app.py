"""The Celery app: msgpack only, late acks, prefetch 1, time limits; on Redis a visibility timeout above them, on
RabbitMQ a quorum queue and publisher confirms (:mod:`worker.queue.broker`).

``celery -A tasks worker --pool gevent --concurrency 1000`` runs a worker (see the Procfile and docs/scaling.md,
"A worker process", for why: a turn waiting on the model holds no CPU, and greenlets switch far more cheaply than threads
fighting over the GIL). ``--pool threads`` works too.
"""

from __future__ import annotations

from typing import Any

from celery import Celery, signals

from worker.queue.broker import QUEUE, broker_conf
from worker.settings import Settings, get_settings

__all__ = ["QUEUE", "make_app"]


def make_app(settings: Settings | None = None) -> Celery:
    """A Celery app configured for Parley (producers use it to send wake-ups, workers to run tasks)."""
    settings = settings or get_settings()
    app = Celery("parley", include=["tasks.conversation", "tasks.export"])
    hard = settings.broker.task_time_limit
    app.conf.update(
        # No pickle anywhere: a pickle payload pushed into the queue is refused, never loaded.
        task_serializer="msgpack",
        result_serializer="msgpack",
        accept_content=["msgpack"],
        result_accept_content=["msgpack"],
        task_ignore_result=True,
        result_backend=None,
        # One (disabled) backend for the process: Celery otherwise builds one per thread, and under the gevent pool
        # per greenlet, i.e. per task, from the configuration each time, left in a greenlet-local that only the
        # cyclic collector frees. The disabled
        # backend holds no connection or state.
        result_backend_thread_safe=True,
        # At-least-once: ack after the task ran; a killed worker's message comes back.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_time_limit=hard,
        task_soft_time_limit=max(1.0, hard - 30),
        # Redis or RabbitMQ: queue declaration, publisher confirms, visibility timeout (worker.queue.broker says why).
        **broker_conf(settings),
        worker_hijack_root_logger=False,
        worker_send_task_events=settings.broker.task_events,
        worker_enable_remote_control=settings.broker.remote_control,
        task_send_sent_event=False,
    )
    if settings.record.export_every_seconds and settings.record.database_url:
        # The exporter as a beat entry (instead of the Procfile's exporter process): see tasks/export.py.
        app.conf.beat_schedule = {"parley-export-records": {
            "task": "parley.export_records", "schedule": settings.record.export_every_seconds,
            "options": {"queue": QUEUE, "expires": settings.record.export_every_seconds}}}
    return app


@signals.setup_logging.connect
def _setup_logging(**_: Any) -> None:
    """Workers log through Parley's formatter (JSON with PARLEY_LOG_JSON), extra fields included."""
    from worker.observability.logs import configure_logging

    configure_logging(get_settings())
