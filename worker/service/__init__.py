"""Applying inputs and delivering replies: the worker's logic, free of Celery.

Tasks in :mod:`tasks` are thin: they build a :class:`ConversationService` once per process and call
:meth:`~ConversationService.drain`, :meth:`~ConversationService.deliver` or
:meth:`~ConversationService.queue_compaction`, mapping the exceptions to Celery retries. ``wake`` is how the
service asks for follow-up work (``wake("drain" | "deliver" | "compact", conversation_id)``); the tasks module
sends Celery tasks for it.

The parts: :class:`~worker.service.drain.Drainer` applies inputs (its module says where each guarantee comes
from), :class:`~worker.service.deliver.deliverer.Deliverer` sends replies, :class:`~worker.service.heartbeat.Heartbeat`
keeps the leases of both alive while they work, :class:`~worker.service.presence.Presence` shows the player read
marks and the typing indicator meanwhile, and :mod:`worker.service.config` holds what they share.
"""

from __future__ import annotations

import time

from worker import metrics
from worker.channels.channel import Channel
from worker.conversation.chat import Chat
from worker.conversation.resident import ResidentCache
from worker.conversation.results import CompactionReport
from worker.envelopes.inputs import Envelope, InputKind, Spent
from worker.errors import RetryLater
from worker.service.config import ServiceConfig, Wake, observe_round_trip
from worker.service.deliver.deliverer import Deliverer
from worker.service.drain import Drained, Drainer
from worker.service.drain.media import MediaPreparer, Prepared
from worker.service.heartbeat import Heartbeat
from worker.service.presence import Presence
from worker.store.interfaces import WorkerStore

__all__ = ["ConversationService", "Deliverer", "Drained", "Drainer", "Heartbeat", "MediaPreparer", "Prepared",
           "Presence", "RetryLater", "ServiceConfig", "Wake"]


def _spent(report: CompactionReport) -> Spent | None:
    u = report.usage
    if u is None:
        return None
    return Spent(prompt=u.prompt_tokens, completion=u.completion_tokens, cached=u.cached_tokens,
                 cache_write=u.cache_creation_tokens, model=report.model)


class ConversationService:
    """The worker's logic over a store, a chat and a delivery channel: the entry the tasks call.

    ``media`` prepares a message envelope for its turn (a photo fetched for a model that reads images, else its
    caption or the short answer; :mod:`worker.service.drain.media`); the default fetches nothing. ``residents`` keeps each
    conversation's state decoded between its turns (:mod:`worker.conversation.resident`; default about 64 MiB).
    The pace the fleet shares is the channel's own (:mod:`worker.channels.pacing`)."""

    def __init__(self, store: WorkerStore, chat: Chat, channel: Channel, wake: Wake,
                 config: ServiceConfig | None = None, *, heartbeat: Heartbeat | None = None,
                 presence: Presence | None = None, media: MediaPreparer | None = None,
                 residents: ResidentCache | None = None) -> None:
        self.store = store
        self.chat = chat
        self.channel = channel
        self.wake = wake
        self.config = config or ServiceConfig()
        if chat.observer is None:
            chat.observer = observe_round_trip
        self.heartbeat = heartbeat or Heartbeat(self.config.drain.lease_ms / 3000, self.config.max_hold_ms / 1000)
        # Off unless given: the runtime builds it from the settings (PARLEY_TYPING_INDICATOR) and the channel.
        self.presence = presence if presence is not None else Presence.disabled()
        self.media = media or MediaPreparer()
        self.deliverer = Deliverer(store, channel, self.config, self.heartbeat)
        self.residents = residents if residents is not None else ResidentCache()
        self.drainer = Drainer(store, chat, wake, self.config, self.heartbeat, deliverer=self.deliverer,
                               presence=self.presence, media=self.media, residents=self.residents)

    def drain(self, cid: str) -> int:
        """Apply every input waiting for ``cid``, in order, then deliver the reply the drain ended with (see
        :meth:`Drainer.drain`); returns how many inputs were applied."""
        return self.drainer.drain(cid).applied

    def deliver(self, cid: str) -> int:
        """Send every reply waiting in ``cid``'s outbox, in order (see :meth:`Deliverer.deliver`)."""
        return self.deliverer.deliver(cid)

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
            env = Envelope(kind=InputKind.SPLICE, conversation_id=cid, message_id=f"compact-{time.time_ns()}",
                           state=report.state, spent=_spent(report))
            self.store.accept(cid, env.to_bytes(), env.message_id, max_inbox=1 << 30)
            queued = True
            self.wake("drain", cid)
            return True
        finally:
            if not queued:
                self.store.clear_compacting(cid)
