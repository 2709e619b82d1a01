"""What every part of the store stands on: :class:`StoreCore` holds the client, the key prefix and builders, the
limits and the one :class:`~worker.store.scripts.Scripts` object; the parts (mailbox, turn journal, outbox, ...) are
mixins over it, composed in :class:`~worker.store.redis_store.ConversationStore`."""

from __future__ import annotations

import time
from typing import Any

from worker.envelopes.addresses import validate_conversation_id
from worker.store.keys import ConversationKeys, GlobalKeys, RecordKeys
from worker.store.limits import StoreLimits
from worker.store.redis_errors import store_errors
from worker.store.replication import Replication
from worker.store.script_args import RecordArgs
from worker.store.scripts import Scripts

_KEYS_CACHED = 4096
# The keys of a conversation that expire when it has been idle ``limits.idle_ttl_ms``. ``paused`` among them: a
# pause outliving the conversation it paused would hold that player's next conversation without an operator; ``blob``
# (the state's parts) with ``state`` (its version and length), or an accept could keep one alive past the other;
# the archive (``recall``, ``recall_index``) with them, as the conversation's own.
_TTL_KEYS = ("state", "inbox", "seen", "fence", "attempts", "outbox", "sent", "dfence", "delivered", "trace",
             "quarantine", "dead", "statuses", "statusorder", "journal", "inbound", "paused", "lastmsg",
             "blob", "recall", "recall_index")


class StoreCore:
    """The client, prefix, limits, key builders and scripts that every part of the store shares, and where the
    parts' scripts append the durable record.

    ``client`` is a redis-py client (``redis.Redis``, ``redis.cluster.RedisCluster``, or fakeredis for tests)
    that returns bytes (no ``decode_responses``).
    """

    def __init__(self, client: Any, prefix: str = "parley", limits: StoreLimits | None = None) -> None:
        self._client = client
        self.prefix = prefix
        self._keys_cache: dict[str, ConversationKeys] = {}
        self.limits = limits or StoreLimits()
        self.global_keys = GlobalKeys(prefix)
        self._cluster = hasattr(client, "get_nodes")  # a Cluster client sends a pipeline's commands per node
        replication = Replication(0 if self._cluster else self.limits.wait_replicas, self.limits.wait_timeout_ms)
        self._scripts = Scripts(client, replication)
        self.records = RecordKeys(prefix, clustered=self._cluster)

    @property
    def client(self) -> Any:
        """The Redis client, for the readers that share this store's connections and keys (the archive's)."""
        return self._client

    def keys(self, cid: str) -> ConversationKeys:
        """The keys of conversation ``cid`` (the id validated first)."""
        # Built (and the id validated) once per conversation while it is among the recently used: a turn asks
        # for them several times. Immutable, so sharing them between threads is safe.
        built = self._keys_cache.get(cid)
        if built is None:
            built = ConversationKeys(self.prefix, validate_conversation_id(cid))
            if len(self._keys_cache) >= _KEYS_CACHED:
                self._keys_cache.clear()  # cheaper than an LRU, and a refill is one build per conversation
            self._keys_cache[cid] = built
        return built

    def _ttl_keys(self, keys: ConversationKeys) -> list[str]:
        if self.limits.idle_ttl_ms <= 0:
            return []
        return [getattr(keys, name) for name in _TTL_KEYS]

    @staticmethod
    def _now_ms() -> int:
        return int(time.time() * 1000)

    def _record_args(self, cid: str, entry: bytes | None, cap: int | None = None) -> RecordArgs:
        """Where ``cid``'s scripts append the durable record, with ``entry``; the keys are named even when the
        record is off (a Cluster routes a script by all its keys, which must share the conversation's slot).
        ``cap``: the stream's cap when it is not this process's own (``limits.record_max``)."""
        stream = self.records.stream(cid)
        cap = self.limits.record_max if cap is None else cap
        on = cap > 0 and bool(entry)
        return RecordArgs(stream, self.records.dropped_of(stream), cap if on else 0, (entry or b"") if on else b"")

    @store_errors
    def deployment_record_cap(self) -> int:
        """The record stream's cap when the deployment keeps a durable record, else 0: this process's own setting,
        or what ``parley db upgrade`` and the exporter announced in Redis (read now, never cached: a delete must
        reach the database whichever process issues it)."""
        if self.limits.record_max > 0:
            return self.limits.record_max
        raw = self._client.get(self.global_keys.record_on)
        try:
            return max(0, int(raw or 0))
        except ValueError:
            return 0

    @store_errors
    def announce_record(self) -> None:
        """Say in Redis that this deployment keeps a durable record (with this process's stream cap)."""
        if self.limits.record_max > 0:
            self._client.set(self.global_keys.record_on, self.limits.record_max)
