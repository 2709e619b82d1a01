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
from collections.abc import Callable
from typing import Any

from amqp.exceptions import PreconditionFailed  # type: ignore[import-untyped]
from kombu.connection import Connection
from kombu.entity import Queue
from kombu.messaging import Consumer, Producer

from worker.client import ConversationClient
from worker.errors import InboxFullError, InputError, StoreError
from worker.inlet.backoff import backoff, pause
from worker.inlet.messages import QueueMessage, Unacceptable, entry_span, parse_message
from worker.inlet.stream import ENTRIES

log = logging.getLogger("parley.inlet")


def inlet_queue(name: str) -> Queue:
    """The inlet's queue as RabbitMQ declares it (a producer declaring it too must pass the same arguments)."""
    return Queue(name, routing_key=name, durable=True,  # type: ignore[no-untyped-call]
                 queue_arguments={"x-queue-type": "quorum", "x-single-active-consumer": True})


def dead_queue(name: str, *, max_length: int | None = None, max_age_s: float | None = None) -> Queue:
    """``<name>.dead``, bounded: RabbitMQ drops its oldest message past ``max_length`` and expires one older than
    ``max_age_s`` (none given: the queue as a producer or an operator reading it declares it, whatever its bounds)."""
    bounds: dict[str, Any] = {}
    if max_length is not None:
        bounds["x-max-length"] = max_length
    if max_age_s is not None:
        bounds["x-message-ttl"] = int(max_age_s * 1000)
    return Queue(f"{name}.dead", routing_key=f"{name}.dead", durable=True,  # type: ignore[no-untyped-call]
                 queue_arguments={"x-queue-type": "quorum", **bounds}, no_declare=not bounds)


def message_id_of(queue: str, body: bytes, properties: dict[str, Any]) -> str:
    given = properties.get("message_id")
    if isinstance(given, str) and given:
        return given
    return f"{queue}/sha256:{hashlib.sha256(body).hexdigest()[:32]}"


class AmqpInlet:
    """Consumes the queue until ``stopping()`` says so."""

    def __init__(self, url: str, client: ConversationClient, queue: str, *, retry_seconds: float = 1.0,
                 max_retry_seconds: float = 30.0, dead_max: int = 10_000, dead_max_age_s: float = 2 * 86400.0) -> None:
        self.url, self.client, self.queue = url, client, queue
        self.retry_seconds, self.max_retry_seconds = retry_seconds, max_retry_seconds
        self.dead_max, self.dead_max_age_s = dead_max, dead_max_age_s

    def run(self, stopping: Callable[[], bool]) -> None:
        """Consume until ``stopping()``; any failure (RabbitMQ away, an error handling a message, which stays
        unacknowledged and comes again) is logged and the connection made again after a growing pause: the thread
        never ends while the process runs."""
        failures = 0
        while not stopping():
            try:
                self._consume(stopping)
                failures = 0
            except (OSError, ConnectionError) as exc:  # amqp's connection errors are OSErrors
                failures += 1
                log.error("inlet: RabbitMQ unavailable, trying again: %s", exc)
                pause(backoff(failures, first=self.retry_seconds, most=self.max_retry_seconds), stopping)
            except Exception:
                failures += 1
                log.exception("inlet: the RabbitMQ consumer failed, connecting again")
                pause(backoff(failures, first=self.retry_seconds, most=self.max_retry_seconds), stopping)

    def _consume(self, stopping: Callable[[], bool]) -> None:
        with Connection(self.url, transport_options={"confirm_publish": True}) as conn:  # type: ignore[no-untyped-call]
            channel = self._declare_dead(conn)
            dead = Producer(channel)  # type: ignore[no-untyped-call]

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

    def _declare_dead(self, conn: Any) -> Any:
        """Declare ``<queue>.dead`` with its bounds; a channel to go on with. A deployment whose dead queue was
        declared before it had bounds keeps it as it is (RabbitMQ refuses to declare a queue again with other
        arguments, PRECONDITION_FAILED, and closes the channel): the inlet goes on with it, unbounded, and says how
        to bound it (docs/producers.md: a policy, or delete the queue once read)."""
        channel = conn.channel()
        try:
            dead_queue(self.queue, max_length=self.dead_max,  # type: ignore[no-untyped-call]
                       max_age_s=self.dead_max_age_s)(channel).declare()
        except PreconditionFailed as exc:
            log.warning("inlet: %s.dead exists without the bounds PARLEY_INLET_DEAD_MAX and "
                        "PARLEY_INLET_DEAD_MAX_AGE_SECONDS ask for (%s); kept unbounded: bound it with a policy "
                        "(max-length, message-ttl) or delete it once read (docs/producers.md)", self.queue, exc)
            channel = conn.channel()  # the refused declare closed the other one
            channel.queue_declare(f"{self.queue}.dead", passive=True)
        return channel

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
                log.warning("inlet: a mailbox is full; the queue waits", extra={"conversation_id": msg.conversation_id})
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
            if pause(wait, stopping):
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
