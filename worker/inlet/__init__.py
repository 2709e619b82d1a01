"""``parley inlet`` (the Procfile's ``inlet`` process): queue messages from a Redis stream (and, when the broker is
RabbitMQ, a durable queue: :mod:`worker.inlet.amqp`) become inputs of their conversations, with the producers' API's guarantees (validated, idempotent by message id, in order per conversation,
held while a mailbox is full, never dropped). See :mod:`worker.inlet.stream` and docs/producers.md."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import redis

from worker.inlet.backoff import backoff, pause
from worker.settings import Settings

log = logging.getLogger("parley.inlet")


def _start_amqp(settings: Settings, client: Any, stopping: Callable[[], bool]) -> None:
    """When the broker is RabbitMQ, consume PARLEY_INLET_QUEUE too, in a thread of its own."""
    from worker.queue.broker import is_amqp

    url = settings.effective_broker_url()
    if not is_amqp(url):
        return
    from worker.inlet.amqp import AmqpInlet

    amqp = AmqpInlet(url, client, settings.producers.inlet_queue, dead_max=settings.producers.inlet_dead_max,
                     dead_max_age_s=settings.producers.inlet_dead_max_age_seconds)
    threading.Thread(target=amqp.run, args=(stopping,), name="inlet-amqp", daemon=True).start()
    log.info("inlet consuming the RabbitMQ queue %s", settings.producers.inlet_queue)


def run_inlet(settings: Settings, *, consumer: str | None = None, once: bool = False) -> int:
    """Consume ``PARLEY_INLET_STREAM`` until SIGTERM or SIGINT; a Redis outage is waited out, never a crash.
    ``once``: one round of the stream (no queue), then return (a probe of the entry point)."""
    from worker.client import ConversationClient
    from worker.inlet.stream import Inlet, export_outcomes

    if settings.observability.metrics_port:
        from prometheus_client import start_http_server

        export_outcomes()
        start_http_server(settings.observability.metrics_port)
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    r = redis.Redis.from_url(settings.redis.url or "redis://localhost:6379/0", socket_timeout=30,
                             health_check_interval=30)
    inlet = Inlet(r, ConversationClient.from_env(), settings.producers.inlet_stream, settings.producers.inlet_group,
                  consumer or f"{socket.gethostname()}-{os.getpid()}", batch=settings.producers.inlet_batch,
                  claim_idle_ms=int(settings.producers.inlet_claim_idle_seconds * 1000),
                  retry_budget=settings.producers.inlet_retry_budget, dead_max=settings.producers.inlet_dead_max,
                  dead_max_age_s=settings.producers.inlet_dead_max_age_seconds)
    if once:
        inlet.ensure_group()
        inlet.step()
        return 0
    log.info("inlet %s consuming %s (group %s)", inlet.consumer, inlet.stream, inlet.group)
    _start_amqp(settings, inlet.client, lambda: stopping)
    ready, failures = False, 0
    while not stopping:
        try:
            if not ready:
                inlet.ensure_group()
                ready = True
            inlet.step()
            failures = 0
        except redis.RedisError as exc:
            failures += 1
            log.error("inlet: Redis unavailable, trying again: %s", exc)
            pause(backoff(failures), lambda: stopping)
        except Exception:  # anything else: the entries stay pending, the loop goes on after a pause
            failures += 1
            log.exception("inlet: a round failed, trying again")
            pause(backoff(failures), lambda: stopping)
    return 0

