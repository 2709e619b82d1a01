"""The RabbitMQ inlet: the durable queue ``PARLEY_INLET_QUEUE`` (when the broker is RabbitMQ), same JSON as the stream.

The queue is a quorum queue with ``x-single-active-consumer``: every inlet process subscribes, RabbitMQ delivers to
one at a time, in queue order, and hands over to another when it goes away (its unacknowledged messages are delivered
again, to the next one, first). One message is in flight at a time and acknowledged only once its input is accepted,
so a conversation's inputs keep the queue's order. A full mailbox or a store outage holds the queue (the message is
tried again, with backoff, until it goes in): order is kept at the price of head-of-line blocking, never a drop. What
can never be accepted is published to ``<queue>.dead`` (with publisher confirms) with its reason in the ``reason``
header, then acknowledged.

Message ids: the JSON's ``message_id``; else the AMQP ``message_id`` property; else ``<queue>/sha256:<digest of the
body>`` (a redelivery after a crash is then a duplicate; an engine that sends the same body twice as two inputs must
give them ids).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any

from kombu.connection import Connection
from kombu.entity import Queue
from kombu.messaging import Consumer, Producer

from worker.client import ConversationClient
from worker.errors import InboxFullError, InputError, StoreError
from worker.inlet.messages import QueueMessage, Unacceptable, entry_span, parse_message
from worker.inlet.stream import ENTRIES

log = logging.getLogger("parley.inlet")


def inlet_queue(name: str) -> Queue:
    """The inlet's queue as RabbitMQ declares it (a producer declaring it too must pass the same arguments)."""
    return Queue(name, routing_key=name, durable=True,  # type: ignore[no-untyped-call]
                 queue_arguments={"x-queue-type": "quorum", "x-single-active-consumer": True})


def dead_queue(name: str) -> Queue:
    return Queue(f"{name}.dead", routing_key=f"{name}.dead", durable=True,  # type: ignore[no-untyped-call]
                 queue_arguments={"x-queue-type": "quorum"})


def message_id_of(queue: str, body: bytes, properties: dict[str, Any]) -> str:
    given = properties.get("message_id")
    if isinstance(given, str) and given:
        return given
    return f"{queue}/sha256:{hashlib.sha256(body).hexdigest()[:32]}"


def _pause(seconds: float, stopping: Callable[[], bool]) -> bool:
    """Wait ``seconds`` unless asked to stop first (True then): a held queue's backoff grows to half a minute, and a
    SIGTERM should not wait that long."""
    deadline = time.monotonic() + seconds
    while not stopping():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(left, 0.2))
    return True


class AmqpInlet:
    """Consumes the queue until ``stopping()`` says so."""

    def __init__(self, url: str, client: ConversationClient, queue: str, *, retry_seconds: float = 1.0,
                 max_retry_seconds: float = 30.0) -> None:
        self.url, self.client, self.queue = url, client, queue
        self.retry_seconds, self.max_retry_seconds = retry_seconds, max_retry_seconds

    def run(self, stopping: Callable[[], bool]) -> None:
        while not stopping():
            try:
                self._consume(stopping)
            except (OSError, ConnectionError) as exc:  # amqp's connection errors are OSErrors
                log.error("inlet: RabbitMQ unavailable, trying again: %s", exc)
                time.sleep(self.retry_seconds)

    def _consume(self, stopping: Callable[[], bool]) -> None:
        with Connection(self.url, transport_options={"confirm_publish": True}) as conn:  # type: ignore[no-untyped-call]
            channel = conn.channel()  # type: ignore[no-untyped-call]
            dead = Producer(channel)  # type: ignore[no-untyped-call]
            dead_queue(self.queue)(channel).declare()  # type: ignore[no-untyped-call]

            def on_message(message: Any) -> None:
                self._handle(message, dead, stopping)

            consumer = Consumer(channel, queues=[inlet_queue(self.queue)], on_message=on_message,  # type: ignore[no-untyped-call]
                                prefetch_count=1)
            with consumer:
                while not stopping():
                    try:
                        conn.drain_events(timeout=1)  # type: ignore[no-untyped-call]
                    except TimeoutError:
                        continue

    def _handle(self, message: Any, dead: Any, stopping: Callable[[], bool]) -> None:
        body = bytes(message.body if isinstance(message.body, bytes) else str(message.body).encode())
        try:
            msg = parse_message(body)
        except Unacceptable as exc:
            self._dead(message, body, dead, exc.reason)
            return
        wait = self.retry_seconds
        while True:
            try:
                with entry_span(msg.conversation_id, (message.headers or {}).get("traceparent")):
                    duplicate = self._accept(msg, body, message.properties)
            except InboxFullError:
                log.warning("inlet: %s's mailbox is full; the queue waits", msg.conversation_id)
            except InputError as exc:
                self._dead(message, body, dead, f"{exc.field}: {exc}" if exc.field else str(exc))
                return
            except StoreError as exc:
                log.error("inlet: store unavailable, the queue waits: %s", exc)
            else:
                message.ack()
                ENTRIES.labels("duplicate" if duplicate else "accepted").inc()
                return
            ENTRIES.labels("held").inc()
            if _pause(wait, stopping):
                return  # not acknowledged: RabbitMQ delivers it again, first, to the next consumer
            wait = min(wait * 2, self.max_retry_seconds)

    def _accept(self, msg: QueueMessage, body: bytes, properties: dict[str, Any]) -> bool:
        kwargs = msg.body.arguments()
        kwargs.setdefault("message_id", message_id_of(self.queue, body, properties))
        cid = self.client.resolve(msg.conversation_id)  # a player's phone number and user id name one conversation
        return self.client.intake.accept(self.client.inputs.build(msg.kind, cid, kwargs)).duplicate

    def _dead(self, message: Any, body: bytes, dead: Any, reason: str) -> None:
        log.warning("inlet: message moved to %s.dead: %s", self.queue, reason)
        dead.publish(body, routing_key=f"{self.queue}.dead", headers={"reason": reason[:1000]},
                     content_type="application/octet-stream", content_encoding="binary", delivery_mode=2)
        message.ack()
        ENTRIES.labels("dead").inc()
