"""Applying inputs and delivering replies: the worker's logic, free of Celery.

Tasks in :mod:`tasks` are thin: they build a :class:`ConversationService` once per process and call
:meth:`~ConversationService.drain`, :meth:`~ConversationService.deliver` or
:meth:`~ConversationService.queue_compaction`, mapping the exceptions to Celery retries. ``wake`` is how the
service asks for follow-up work (``wake("drain" | "deliver" | "compact", conversation_id)``); the tasks module
sends Celery tasks for it.

The parts: :class:`~worker.service.drain.Drainer` applies inputs (its module says where each guarantee comes
from), :class:`~worker.service.delivery.Deliverer` sends replies, :class:`~worker.service.heartbeat.Heartbeat`
keeps the leases of both alive while they work, and :mod:`worker.service.config` holds what they share.
"""

from __future__ import annotations

import time

from worker import metrics
from worker.conversation.chat import Chat
from worker.delivery.channel import Channel
from worker.envelopes import Envelope
from worker.service.config import RetryLater, ServiceConfig, Wake, observe_round_trip
from worker.service.delivery import Deliverer
from worker.service.drain import Claimed, Drainer
from worker.service.heartbeat import Heartbeat
from worker.store.redis_store import ConversationStore

__all__ = ["ConversationService", "Deliverer", "Drainer", "Heartbeat", "RetryLater", "ServiceConfig", "Wake"]


class ConversationService:
    """The worker's logic over a store, a chat and a delivery channel: the entry the tasks call."""

    def __init__(self, store: ConversationStore, chat: Chat, channel: Channel, wake: Wake,
                 config: ServiceConfig | None = None, *, heartbeat: Heartbeat | None = None) -> None:
        self.store = store
        self.chat = chat
        self.channel = channel
        self.wake = wake
        self.config = config or ServiceConfig()
        if chat.observer is None:
            chat.observer = observe_round_trip
        self.heartbeat = heartbeat or Heartbeat(self.config.lease_ms / 3000, self.config.max_hold_ms / 1000)
        self.deliverer = Deliverer(store, channel, self.config, self.heartbeat)
        self.drainer = Drainer(store, chat, wake, self.config, self.heartbeat, self.deliverer.deliver)

    def drain(self, cid: str) -> int:
        """Apply every input waiting for ``cid``, in order (see :meth:`Drainer.drain`)."""
        return self.drainer.drain(cid)

    def deliver(self, cid: str, *, claimed: Claimed | None = None) -> int:
        """Send every reply waiting in ``cid``'s outbox, in order (see :meth:`Deliverer.deliver`)."""
        return self.deliverer.deliver(cid, claimed)

    def queue_compaction(self, cid: str) -> bool:
        """Compute a compaction off to the side and queue it as a splice input; returns whether one was queued.

        Never blocks a turn: the expensive part (the summariser) runs without the lease; the splice is
        applied in order by the drainer, keeping whatever arrived meanwhile. A failure changes nothing.
        """
        if not self.store.try_mark_compacting(cid, self.config.compaction_flag_ms):
            return False
        queued = False
        try:
            current = self.store.read_state(cid)
            if not current.blob or not self.chat.needs_compaction(current.blob):
                return False
            report = self.chat.compact_with_report(current.blob)
            if not report.changed:
                metrics.COMPACTIONS.labels("failed" if report.errors else "noop").inc()
                return False
            metrics.COMPACTION_SAVED.inc(max(0, report.tokens_before - report.tokens_after))
            env = Envelope(kind="splice", conversation_id=cid, message_id=f"compact-{time.time_ns()}",
                           state=report.state)
            self.store.accept(cid, env.to_bytes(), env.message_id, max_inbox=1 << 30)
            queued = True
            self.wake("drain", cid)
            return True
        finally:
            if not queued:
                self.store.clear_compacting(cid)
