"""kombu's Redis transport, taking a batch of wake-ups per round trip when the worker has free slots.

kombu's Redis transport fetches one message per BRPOP: after each one the worker goes round its poll loop,
registers the socket again and sends the next BRPOP, and the message's entry in the unacked index costs a round
trip of its own. With 1,000 turns in flight on a 2 s model a process must take 500 messages a second just to keep
its slots full; one at a time it took about 1,000/s and spent a wave's worth of time refilling them.

This channel keeps the BRPOP (so an idle worker still blocks, and wakes on the first message), and when that BRPOP
returns a message it takes up to as many more as the worker has free slots for (``qos.can_consume_max_estimate``,
which is Celery's prefetch: its concurrency times ``worker_prefetch_multiplier``, ETA tasks included), capped at
``fetch_batch``, in one ``LMPOP`` from the same queues in the same priority order as the BRPOP. The batch's
entries in the unacked index and hash are written in one transaction *before* any of them is handed to Celery, so
the batch is exactly as safe as kombu's own messages (a message popped but not yet in the index is lost to a crash,
in kombu as here; here that window is one round trip for the whole batch, not one a message), and each message is
then acked, rejected, restored at shutdown and redelivered after ``visibility_timeout`` as kombu does it.

Acks are written as a group too (:class:`QoS`): with a thousand greenlets finishing turns, an ack was a round trip
of its own (13% of the gevent worker's samples under the LLM-bound load).

A server without ``LMPOP`` (before Redis 7.0) answers with an error once, and the channel falls back to kombu's
one-at-a-time behaviour. Used for ``redis://`` brokers without a global key prefix (:func:`worker.queue.broker.broker_conf`);
``rediss://``, Sentinel and Unix socket brokers keep kombu's transport.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils import encoding
from kombu.utils import json as kombu_json
from redis.exceptions import ResponseError

# kombu's own codecs (as its transport reads and writes these values), typed once.
bytes_to_str: Callable[[bytes | str], str] = encoding.bytes_to_str
loads: Callable[[str], Any] = kombu_json.loads
dumps: Callable[[Any], str] = kombu_json.dumps

FETCH_BATCH = 100
"""At most this many messages are taken in one round trip after a BRPOP (bounded also by the free slots)."""


class QoS(kombu_redis.QoS):
    """kombu's QoS, told which delivery tags the channel has already written to the unacked index, and writing acks
    as a group: while one ack's round trip is out, the acks that come meanwhile (other greenlets' or threads') wait
    in a list and its writer sends them all in one more round trip, instead of one round trip each."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self.recorded: set[str] = set()
        self._acks: list[str] = []
        self._acks_lock = threading.Lock()
        self._writing_acks = False

    def ack(self, delivery_tag: str) -> None:
        with self._acks_lock:
            self._acks.append(delivery_tag)
            writer, self._writing_acks = not self._writing_acks, True
        if writer:
            self._write_acks()
        # Otherwise the writer out now takes it in its next round trip (a crash before that redelivers the message
        # after the visibility timeout, as a crash just before kombu's own ack does).
        virtual.QoS.ack(self, delivery_tag)  # type: ignore[no-untyped-call]

    def _write_acks(self) -> None:
        while True:
            with self._acks_lock:
                tags, self._acks = self._acks, []
                if not tags:
                    self._writing_acks = False
                    return
            try:
                with self.channel.conn_or_acquire() as client:
                    client.pipeline().zrem(self.unacked_index_key, *tags).hdel(self.unacked_key, *tags).execute()
            except BaseException:
                with self._acks_lock:  # the next ack's writer tries them again
                    self._acks[:0] = tags
                    self._writing_acks = False
                raise

    def append(self, message: Any, delivery_tag: str) -> None:
        if delivery_tag in self.recorded:
            self.recorded.discard(delivery_tag)
            virtual.QoS.append(self, message, delivery_tag)  # type: ignore[no-untyped-call]  # the in-memory part only: Redis has it already
        else:
            super().append(message, delivery_tag)  # type: ignore[no-untyped-call]


class BatchingChannel(kombu_redis.Channel):
    """A Redis channel that, after a BRPOP delivered, takes up to the free slots' worth more in one LMPOP."""

    QoS = QoS
    from_transport_options = (*kombu_redis.Channel.from_transport_options, "fetch_batch")  # type: ignore[assignment]
    fetch_batch = FETCH_BATCH
    _lmpop = True  # cleared when the server does not know LMPOP

    def _brpop_read(self, **options: Any) -> bool:
        delivered: bool = super()._brpop_read(**options)  # type: ignore[no-untyped-call]
        if delivered and self._lmpop and self.fetch_batch > 0 and not self.global_keyprefix:
            self._take_more()
        return delivered

    def _take_more(self) -> None:
        free = self.qos.can_consume_max_estimate()  # None: no prefetch limit
        room = self.fetch_batch if free is None else min(self.fetch_batch, free)
        queues = list(self.active_queues)
        if room <= 0 or not queues:
            return
        keys = [self._q_for_pri(queue, pri) for pri in self.priority_steps  # type: ignore[no-untyped-call]
                for queue in queues]
        try:
            answer = self.client.execute_command("LMPOP", len(keys), *keys, "RIGHT", "COUNT", room)
        except ResponseError:
            self._lmpop = False  # an older server: one message per BRPOP, as kombu does it
            return
        if not answer:
            return
        dest = bytes_to_str(answer[0]).rsplit(self.sep, 1)[0]
        payloads = [loads(bytes_to_str(item)) for item in answer[1]]
        self._record_unacked(payloads)
        for i, payload in enumerate(payloads):
            try:
                self.connection._deliver(payload, dest)
            except BaseException:
                # What was not handed over goes back to the queue now, not after the visibility timeout.
                for rest in reversed(payloads[i + 1:]):  # each to the consuming end: the first ends up next
                    tag = rest["properties"]["delivery_tag"]
                    self.qos.recorded.discard(tag)
                    self.qos.restore_by_tag(tag)
                raise

    def _record_unacked(self, payloads: list[dict[str, Any]]) -> None:
        """The batch's entries in the unacked index and hash, in one transaction (what ``QoS.append`` writes)."""
        qos: QoS = self.qos
        now = time.time()
        with qos.pipe_or_acquire() as pipe:
            for payload in payloads:
                properties = payload["properties"]
                tag, info = properties["delivery_tag"], properties["delivery_info"]
                pipe.zadd(qos.unacked_index_key, {tag: now})
                pipe.hset(qos.unacked_key, tag, dumps([payload, info["exchange"], info["routing_key"]]))
            pipe.execute()
        qos.recorded.update(p["properties"]["delivery_tag"] for p in payloads)


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`BatchingChannel`."""

    Channel = BatchingChannel
