"""The game's last good live context, on every backend: kept beside the state under the conversation's hash tag,
expiring after the configured age, one conversation's never another's, and deleted with the conversation."""

from __future__ import annotations

import redis

from worker.store.redis_store import ConversationStore

CID = "447700900123"


def test_a_kept_context_reads_back_with_its_time_and_expires(store: ConversationStore, client: redis.Redis) -> None:
    assert store.last_context(CID) is None
    store.keep_context(CID, "Player is 120 m from the target.\nSecond line.", at=1_700_000_000.25, ttl_ms=60_000)
    assert store.last_context(CID) == ("Player is 120 m from the target.\nSecond line.", 1_700_000_000.25)
    assert 0 < client.pttl(store.keys(CID).context) <= 60_000
    assert store.keys(CID).context.startswith(f"{store.prefix}:{{{CID}}}:")  # the conversation's slot
    assert store.last_context("other") is None
    store.keep_context(CID, "", at=1_700_000_001.0, ttl_ms=60_000)  # the game said: nothing now
    assert store.last_context(CID) == ("", 1_700_000_001.0)


def test_an_unreadable_kept_context_reads_as_none(store: ConversationStore, client: redis.Redis) -> None:
    client.set(store.keys(CID).context, b"no time here")
    assert store.last_context(CID) is None
    client.set(store.keys(CID).context, b"soon\ntext")
    assert store.last_context(CID) is None


def test_delete_removes_the_kept_context(store: ConversationStore, client: redis.Redis) -> None:
    store.accept(CID, b"x", "m1")
    store.keep_context(CID, "secret game state", at=1.0, ttl_ms=60_000)
    store.delete(CID)
    assert client.exists(store.keys(CID).context) == 0 and store.last_context(CID) is None
