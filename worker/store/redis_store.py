"""The Redis store: mailbox, lease with fencing, atomic commit, outbox, trace, dead letters, sweeper support.

State and envelopes are opaque bytes here. Every multi-key change of one conversation is one Lua script
(see :mod:`worker.store.lua`, called through :mod:`worker.store.scripts`), so it is atomic and runs unchanged on
Redis Cluster; the only global keys (the sweeper's ``pending`` set and the dead-letter index) are updated by
separate commands, ordered so that a crash between them strands nothing.

:class:`ConversationStore` is the composition of five parts split by who calls them, over one shared base
(client, prefix, limits, scripts): :class:`~worker.store.mailbox.MailboxStore` (producers and the drain),
:class:`~worker.store.journal.JournalStore` (the drain's turn journal), :class:`~worker.store.outbox.OutboxStore`
(delivery), :class:`~worker.store.rules.RulesStore` (the customer-service window's clock and the shared pace),
:class:`~worker.store.admin.AdminStore` (sweeper, CLI), :class:`~worker.store.backlog.BacklogStore` (autoscaling
signals) and :class:`~worker.store.records.RecordStore` (the durable record's exporter).
"""

from __future__ import annotations

from typing import Any

import redis

from worker.store.admin import AdminStore
from worker.store.backlog import Backlog, BacklogStore
from worker.store.base import (
    AcceptResult,
    Begin,
    CommitResult,
    JournalRead,
    OutboxHead,
    Snapshot,
    StateRead,
    StoreLimits,
    join_entry,
    split_entry,
)
from worker.store.journal import JournalStore
from worker.store.mailbox import MailboxStore
from worker.store.outbox import OutboxStore
from worker.store.protocol import DeliveryStore, DrainStore, PaceStore, Store, SweeperStore
from worker.store.records import RecordBacklog, RecordStore, StreamEntry
from worker.store.rules import Pace, PaceLimits, RulesStore

__all__ = ["AcceptResult", "Backlog", "Begin", "CommitResult", "ConversationStore", "DeliveryStore", "DrainStore",
           "JournalRead", "OutboxHead", "Pace", "PaceLimits", "PaceStore", "RecordBacklog", "Snapshot", "StateRead", "Store",
           "StoreLimits", "StreamEntry", "SweeperStore", "from_url", "join_entry", "split_entry"]


class ConversationStore(MailboxStore, JournalStore, OutboxStore, RulesStore, AdminStore, BacklogStore, RecordStore):
    """Conversation storage on Redis (standalone, Sentinel-managed or Cluster)."""


def _satisfies_store(store: ConversationStore) -> Store:
    """Never called: mypy checks here that the Redis store satisfies the protocol the service depends on."""
    return store


def from_url(url: str, **kwargs: Any) -> redis.Redis:
    return redis.Redis.from_url(url, **kwargs)
