"""The game's last good live context, on every backend: kept beside the state under the conversation's hash tag,
expiring after the configured age, one conversation's never another's, written only under the conversation's newest
lease, and deleted with the conversation."""

from __future__ import annotations

import redis

from worker.store.redis_store import ConversationStore

CID = "447700900123"


def _lease(store: ConversationStore, cid: str = CID) -> int:
    """Take the drain's lease of ``cid`` (an input waiting), as a turn holds it while it fetches the context."""
    store.accept(cid, b"x", "m1")
    begin = store.begin(cid, 10_000)
    assert begin.status == "ok"
    return begin.token


def test_a_kept_context_reads_back_with_its_time_and_expires(store: ConversationStore, client: redis.Redis) -> None:
    assert store.last_context(CID) is None
    token = _lease(store)
    assert store.keep_context(CID, token, "Player is 120 m from the target.\nSecond line.", at=1_700_000_000.25,
                              ttl_ms=60_000)
    assert store.last_context(CID) == ("Player is 120 m from the target.\nSecond line.", 1_700_000_000.25)
    assert 0 < client.pttl(store.keys(CID).context) <= 60_000
    assert store.keys(CID).context.startswith(f"{store.prefix}:{{{CID}}}:")  # the conversation's slot
    assert store.last_context("other") is None
    store.keep_context(CID, token, "", at=1_700_000_001.0, ttl_ms=60_000)  # the game said: nothing now
    assert store.last_context(CID) == ("", 1_700_000_001.0)


def test_an_unreadable_kept_context_reads_as_none(store: ConversationStore, client: redis.Redis) -> None:
    client.set(store.keys(CID).context, b"no time here")
    assert store.last_context(CID) is None
    client.set(store.keys(CID).context, b"soon\ntext")
    assert store.last_context(CID) is None


def test_delete_removes_the_kept_context_and_a_late_write_cannot_bring_it_back(store: ConversationStore,
                                                                                 client: redis.Redis) -> None:
    token = _lease(store)
    store.keep_context(CID, token, "secret game state", at=1.0, ttl_ms=60_000)
    store.delete(CID)
    assert client.exists(store.keys(CID).context) == 0 and store.last_context(CID) is None
    # a worker still fetching when the conversation was deleted: its write is refused
    assert not store.keep_context(CID, token, "secret game state", at=2.0, ttl_ms=60_000)
    assert client.exists(store.keys(CID).context) == 0


def test_only_the_newest_lease_writes(store: ConversationStore, client: redis.Redis) -> None:
    old = _lease(store)
    client.delete(store.keys(CID).lease)  # the old worker's lease ran out; another took the conversation
    new = store.begin(CID, 10_000).token
    assert new > old
    assert not store.keep_context(CID, old, "from the stale worker", at=1.0, ttl_ms=60_000)
    assert store.last_context(CID) is None
    assert store.keep_context(CID, new, "from the owner", at=2.0, ttl_ms=60_000)
    assert store.last_context(CID) == ("from the owner", 2.0)
