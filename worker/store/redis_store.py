"""The Redis store: mailbox, lease with fencing, atomic commit, outbox, trace, dead letters, sweeper support.

State and envelopes are opaque bytes here. Every multi-key change of one conversation is one Lua script (the files
of ``worker/store/lua/``, called through :mod:`worker.store.scripts`), so it is atomic and runs unchanged on Redis
Cluster; the only global keys (the sweeper's ``pending`` set and the dead-letter index) are updated by separate
commands, ordered so that a crash between them strands nothing.

:class:`ConversationStore` is the composition of the parts split by who calls them, over one shared core
(:class:`~worker.store.core.StoreCore`: client, prefix, limits, scripts):

- :class:`~worker.store.accepts.AcceptStore`: producers' inputs into the mailbox;
- :class:`~worker.store.mailbox.MailboxStore`: the drain;
- :class:`~worker.store.journal.TurnJournalStore`: the drain's turn journal;
- :class:`~worker.store.outbox.OutboxStore`: delivery, with the customer-service window's clock;
- :class:`~worker.store.delivery_statuses.DeliveryStatusStore`: status webhooks, and the ingress's word that it
  records them;
- :class:`~worker.store.shared_pace.SharedPaceStore`: the pace every worker shares;
- :class:`~worker.store.admin.AdminStore`: the sweeper, the CLI, health checks;
- :class:`~worker.store.autoscaling.AutoscalingStore`: the backlog an autoscaler reads;
- :class:`~worker.store.record_streams.RecordStreamStore`: the durable record's exporter;
- :class:`~worker.store.timers.TimerStore`: inputs held until they are due (producers, the timer loop, the CLI).
- :class:`~worker.store.game_context.GameContextStore`: the game's last good live context (the drain).
- :class:`~worker.store.pauses.PauseStore`: a person taking a conversation over (pause, resume, the gauge).
- :class:`~worker.store.identities.IdentityStore`: a player's ids (phone number, BSUID) linked to one conversation,
  where a reply goes now, and the opt-outs.

What the service sees of it are the protocols of :mod:`worker.store.interfaces`; what it answers,
:mod:`worker.store.answers`.
"""

from __future__ import annotations

from typing import Any

import redis

from worker.store.accepts import AcceptStore
from worker.store.admin import AdminStore
from worker.store.answers import (
    AcceptResult,
    Backlog,
    Begin,
    CommitResult,
    JournalRead,
    OutboxHead,
    Pace,
    RecordBacklog,
    Snapshot,
    StateRead,
    StreamEntry,
    WakePush,
)
from worker.store.autoscaling import AutoscalingStore
from worker.store.delivery_statuses import DeliveryStatusStore
from worker.store.entry_codec import join_entry, split_entry
from worker.store.game_context import GameContextStore
from worker.store.identities import IdentityStore
from worker.store.interfaces import DeliveryStore, DrainStore, PaceStore, SweeperStore, WorkerStore
from worker.store.journal import TurnJournalStore
from worker.store.limits import PaceLimits, StoreLimits
from worker.store.mailbox import MailboxStore
from worker.store.outbox import OutboxStore
from worker.store.pauses import PauseStore
from worker.store.record_streams import RecordStreamStore
from worker.store.shared_pace import SharedPaceStore
from worker.store.timers import TimerStore

__all__ = [
    "AcceptResult",
    "Backlog",
    "Begin",
    "CommitResult",
    "ConversationStore",
    "DeliveryStore",
    "DrainStore",
    "JournalRead",
    "OutboxHead",
    "Pace",
    "PaceLimits",
    "PaceStore",
    "RecordBacklog",
    "Snapshot",
    "StateRead",
    "StoreLimits",
    "StreamEntry",
    "SweeperStore",
    "WakePush",
    "WorkerStore",
    "from_url",
    "join_entry",
    "split_entry",
]


class ConversationStore(AcceptStore, MailboxStore, TurnJournalStore, OutboxStore, DeliveryStatusStore, SharedPaceStore,
                        AdminStore, AutoscalingStore, RecordStreamStore, TimerStore, GameContextStore, PauseStore,
                        IdentityStore):
    """Conversation storage on Redis (standalone, Sentinel-managed or Cluster)."""


def _satisfies_store(store: ConversationStore) -> WorkerStore:
    """Never called: mypy checks here that the Redis store satisfies the protocol the service depends on."""
    return store


def from_url(url: str, **kwargs: Any) -> redis.Redis:
    return redis.Redis.from_url(url, **kwargs)
