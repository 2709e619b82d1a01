"""The admin side of the store: what the sweeper, the CLI and health checks call (finding stranded conversations,
locks, reads for inspection, dead-letter replay, delete)."""

from __future__ import annotations

from typing import Any

from worker.conversation.recall.codec import count_archive
from worker.errors import ArchiveDecodeError, InvalidConversationIdError
from worker.store.entry_codec import join_entry, position_score, split_entry
from worker.store.identities import IdentityStore
from worker.store.redis_errors import store_errors

# What the sweeper reads of each candidate conversation, in this order (see ``stranded``).
_PROBES: tuple[tuple[str, ...], ...] = (
    ("llen", "inbox"), ("llen", "outbox"), ("exists", "lease"), ("exists", "dlease"), ("exists", "hold"),
    ("hlen", "attempts"), ("hexists", "sent", "inflight"),
)


class AdminStore(IdentityStore):
    """Sweeping, inspecting and repairing conversations."""

    @store_errors
    def stranded(self, limit: int = 1000, older_than_ms: int = 5000, backlog_ms: int | None = None) -> list[str]:
        """Conversations with waiting inputs or replies and nobody working on them. Conversations with nothing
        left are dropped from the ``pending`` set (unless an input reached the empty mailbox since we looked).

        Two ages, because two very different things look alike here. A worker that died mid-turn or mid-send left
        evidence: an attempt counted at the mailbox head (``begin`` counts it; the commit clears it) or a part
        marked in flight (claimed before the send, cleared after it or when the send is to be retried later, so a
        delivery backing off from throttling is not woken early). Those are listed once idle ``older_than_ms``: soon, so a dead
        worker's players wait seconds, not minutes. Idle is measured from the mark's score: stamped when an input
        reaches an empty mailbox and when a sweep lists the conversation, not by inputs queued behind others (a
        player who keeps writing must not hide a dead worker's conversation). Work with no such evidence is most likely queued behind a
        backlog of wake-ups, and waking it again would add tasks exactly when the workers are already behind; it
        is listed only once idle ``backlog_ms`` (default: ``older_than_ms``), the net for a lost wake-up. Every
        conversation listed is re-stamped, so a backlog that outlasts the cutoff wakes it once per cutoff, not on
        every sweep."""
        now = self._now_ms()
        backlog_cutoff = now - (older_than_ms if backlog_ms is None else max(backlog_ms, older_than_ms))
        rows = self._client.zrangebyscore(self.global_keys.pending, "-inf", now - older_than_ms, start=0, num=limit,
                                     withscores=True)
        candidates: list[tuple[bytes, float, str]] = []
        pipe = self._client.pipeline(transaction=False)  # one round trip for the whole batch, not one per conversation
        for member, score in rows:
            cid = member.decode("utf-8", "replace")
            try:
                keys = self.keys(cid)
            except InvalidConversationIdError:  # written by something else: it can never be drained
                self._client.zrem(self.global_keys.pending, member)
                continue
            candidates.append((member, score, cid))
            for command, key, *field in _PROBES:
                getattr(pipe, command)(getattr(keys, key), *field)
        replies = pipe.execute() if candidates else []
        out: list[str] = []
        width = len(_PROBES)
        for i, (member, score, cid) in enumerate(candidates):
            inbox, outbox, lease, dlease, hold, attempted, claimed = replies[i * width:(i + 1) * width]
            if not inbox and not outbox:
                self._scripts.zrem_if_score(zset=self.global_keys.pending, member=member, score=score)
                continue
            inputs_wait = bool(inbox) and not lease and not hold
            replies_wait = bool(outbox) and not dlease
            abandoned = (inputs_wait and attempted) or (replies_wait and claimed)
            if abandoned or ((inputs_wait or replies_wait) and score <= backlog_cutoff):
                out.append(cid)
        if out:
            self._client.zadd(self.global_keys.pending, dict.fromkeys(out, now), xx=True)
        return out

    @store_errors
    def try_lock(self, name: str, ttl_ms: int) -> bool:
        return bool(self._client.set(self.global_keys.lock(name), b"1", nx=True, px=ttl_ms))

    @store_errors
    def ping(self) -> bool:
        return bool(self._client.ping())

    @store_errors
    def push_mark(self, key: str, mark: str) -> None:
        """Append ``mark`` to the list at ``key`` (outside every conversation): the ``parley.ping`` task's record
        of when it ran, read by benchmarks and health probes."""
        self._client.rpush(key, mark)

    @store_errors
    def archive_size(self, cid: str) -> tuple[int | None, int]:
        """How many messages the conversation's archive holds (None when its bytes cannot be read) and its bytes
        (the compressed batches ``PARLEY_RECALL_MAX_BYTES`` bounds; the search index is apart). Reads the archive's
        bytes and counts the rows of each batch without decoding them: for inspection, never a turn."""
        data = b"".join(self._client.lrange(self.keys(cid).recall, 0, -1))
        try:
            return count_archive(data), len(data)
        except ArchiveDecodeError:
            return None, len(data)

    @store_errors
    def inbox_depth(self, cid: str) -> int:
        return int(self._client.llen(self.keys(cid).inbox))

    @store_errors
    def deleted_at_ms(self, cid: str) -> float | None:
        """When the conversation was last deleted (ms), while its tombstone lasts; None when no tombstone says so."""
        newest: Any = self._client.zrevrange(self.keys(cid).tomb, 0, 0, withscores=True)
        return float(newest[0][1]) if newest else None

    def inbox_depths(self, cids: list[str]) -> list[int]:
        """:meth:`inbox_depth` of each of ``cids``, in one round trip."""
        pipe = self._client.pipeline(transaction=False)
        for cid in cids:
            pipe.llen(self.keys(cid).inbox)
        return [int(n) for n in pipe.execute()]

    def outbox_depth(self, cid: str) -> int:
        return int(self._client.llen(self.keys(cid).outbox))

    @store_errors
    def inbox(self, cid: str) -> list[tuple[str, bytes]]:
        return [split_entry(e) for e in self._client.lrange(self.keys(cid).inbox, 0, -1)]

    @store_errors
    def outbox(self, cid: str) -> list[tuple[str, bytes]]:
        return [split_entry(e) for e in self._client.lrange(self.keys(cid).outbox, 0, -1)]

    @store_errors
    def trace(self, cid: str, limit: int = 100) -> list[bytes]:
        return list(self._client.lrange(self.keys(cid).trace, -limit, -1))

    @store_errors
    def quarantined(self, cid: str) -> list[bytes]:
        return list(self._client.lrange(self.keys(cid).quarantine, 0, -1))

    @store_errors
    def dead_letters(self, cid: str) -> list[bytes]:
        return list(self._client.lrange(self.keys(cid).dead, 0, -1))

    @store_errors
    def dead_index(self) -> list[str]:
        return [m.decode() for m in self._client.zrange(self.global_keys.dead_index, 0, -1)]

    @store_errors
    def replay_dead(self, cid: str, index: int, *, target: str, entry_id: str, payload: bytes) -> bool:
        """Move dead letter ``index`` back to the end of the mailbox (``target="inbox"``) or the outbox.
        ``entry_id``/``payload`` are what to queue (decoded from the dead letter by the caller)."""
        keys = self.keys(cid)
        current = self._client.lindex(keys.dead, index)
        if current is None:
            return False
        ok = self._scripts.replay(dead=keys.dead, target=keys.inbox if target == "inbox" else keys.outbox, index=index,
                                  expected=current, entry=join_entry(entry_id, payload))
        if ok:
            self._client.zadd(self.global_keys.pending, {cid: self._now_ms()})
            if not self._client.llen(keys.dead):
                self._client.zrem(self.global_keys.dead_index, cid)
        return ok

    @store_errors
    def delivered(self, cid: str) -> list[tuple[str, list[str]]]:
        """Delivered replies (oldest first) with the provider's message ids of their parts."""
        out = []
        for e in self._client.lrange(self.keys(cid).delivered, 0, -1):
            rid, _, ids = e.decode().partition("\t")
            out.append((rid, ids.split(",") if ids else []))
        return out

    @store_errors
    def delete(self, cid: str, record: bytes | None = None) -> None:
        """Delete every key of the conversation and forget it in the global indexes.

        The input ids it had accepted stay behind in a tombstone for ``limits.tombstone_ms`` (bounded like the
        dedupe memory): WhatsApp retries a webhook for about 36 hours, and a retry must not bring the deleted
        conversation back. New ids start a fresh conversation.

        When the deployment keeps a durable record (this process's setting or the announcement in Redis, see
        :meth:`deployment_record_cap`), the delete is recorded too, and the exporter erases the conversation from
        PostgreSQL: a game engine or the webhook, which need no database of their own, delete there as well.
        ``record``: that entry, encoded by the caller (the durable record's ``delete``); ``None`` records nothing."""
        keys = self.keys(cid)
        cap = self.deployment_record_cap()
        # The timer and pause indexes first: a timer held (or a pause set) while the delete runs then keeps its entry
        # (an index may be early, never late); dropped after the script, a timer held in between would never fire.
        self._client.zrem(self.global_keys.timers_due, cid)
        self._client.zrem(self.global_keys.paused, cid)
        _, recorded = self._scripts.delete(keys=keys, now_ms=self._now_ms(), tomb_ms=self.limits.tombstone_ms,
                                           tomb_max=self.limits.dedupe_max_ids,
                                           record=self._record_args(cid, record if cap else None, cap))
        if recorded is not None:  # the exporter erases it even if the stream's cap drops that record
            self._client.zadd(self.global_keys.record_deletes, {cid: position_score(recorded)})
        self._client.zrem(self.global_keys.pending, cid)
        self._client.zrem(self.global_keys.dead_index, cid)
        self.forget_identities(cid)  # the links and the address; the opt-out stays
