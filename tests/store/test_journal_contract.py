"""The turn journal's store contract, on every backend: entries are written only under the current lease and only
for the head input, read back by step and call id, bounded, and gone with the commit that applies the input, with
delete and with the idle TTL."""

from __future__ import annotations

import pytest
import redis

from tests.support.store_kit import StoreKit
from worker.errors import StaleLeaseError
from worker.store.redis_store import ConversationStore, StoreLimits

CID = "447700900555"


def _begin(store: ConversationStore, *ids: str) -> tuple[int, int]:
    for i in ids:
        store.accept(CID, f"payload-{i}".encode(), i)
    b = store.begin(CID, 10_000)
    assert b.status == "ok" and b.snapshot is not None
    return b.token, b.snapshot.version


def test_entries_are_read_back_by_step_and_call_id(store: ConversationStore) -> None:
    token, _ = _begin(store, "in-1")
    assert store.read_journal(CID, "in-1").rounds == {}
    assert store.record_step(CID, token, "in-1", step=0, entry=b"round-0")
    assert store.record_step(CID, token, "in-1", step=0, call_id="call_a", entry=b"result-a")
    assert store.record_step(CID, token, "in-1", step=0, call_id="call\nodd:id", entry=b"result-odd")
    assert store.record_step(CID, token, "in-1", step=1, entry=b"round-1")
    assert store.record_step(CID, token, "in-1", step=1, call_id="call_a", entry=b"result-a-again")  # same id, later round
    j = store.read_journal(CID, "in-1")
    assert j.rounds == {0: b"round-0", 1: b"round-1"}
    assert j.results == {(0, "call_a"): b"result-a", (0, "call\nodd:id"): b"result-odd",
                         (1, "call_a"): b"result-a-again"}
    assert store.read_journal(CID, "in-2").rounds == {}  # another input's view is empty


def test_a_fenced_out_worker_records_nothing(store: ConversationStore) -> None:
    token, _ = _begin(store, "in-1")
    store.release(CID, token)
    newer = store.begin(CID, 10_000).token
    assert newer > token
    with pytest.raises(StaleLeaseError):  # a stale token records nothing
        store.record_step(CID, token, "in-1", step=0, entry=b"stale")
    assert store.read_journal(CID, "in-1").rounds == {}
    assert store.record_step(CID, newer, "in-1", step=0, entry=b"fresh")


def test_only_the_head_input_is_journaled(store: ConversationStore) -> None:
    token, _ = _begin(store, "in-1", "in-2")
    with pytest.raises(StaleLeaseError):  # an input behind the head is not journaled
        store.record_step(CID, token, "in-2", step=0, entry=b"not the head")
    assert store.read_journal(CID, "in-2").rounds == {}


def test_the_commit_that_applies_the_input_deletes_its_journal(store: ConversationStore, client: redis.Redis) -> None:
    token, version = _begin(store, "in-1", "in-2")
    store.record_step(CID, token, "in-1", step=0, entry=b"r")
    store.record_step(CID, token, "in-1", step=0, call_id="c", entry=b"x")
    done = store.commit(CID, token, expected_version=version, input_id="in-1", new_state=b"s", reply=b"hi")
    assert client.exists(store.keys(CID).journal) == 0
    assert store.read_journal(CID, "in-1").results == {}
    # a stale commit (refused) leaves the journal for the retry
    store.record_step(CID, token, "in-2", step=0, entry=b"r2")
    try:
        store.commit(CID, token, expected_version=version, input_id="in-2", new_state=b"s")
        raise AssertionError("commit at an old version went through")
    except StaleLeaseError:
        pass
    assert store.read_journal(CID, "in-2").rounds == {0: b"r2"}
    store.commit(CID, token, expected_version=done.version, input_id="in-2", new_state=None, dead=b"dead")
    assert client.exists(store.keys(CID).journal) == 0  # a dead-lettering commit deletes it too


def test_the_journal_is_bounded(client: redis.Redis, prefix: str) -> None:
    store = ConversationStore(client, prefix=prefix, limits=StoreLimits(journal_max=3))
    store.accept(CID, b"p", "in-1")
    token = store.begin(CID, 10_000).token
    assert all(store.record_step(CID, token, "in-1", step=i, entry=b"r") for i in range(3))
    assert not store.record_step(CID, token, "in-1", step=3, entry=b"r")  # full: not kept
    assert store.record_step(CID, token, "in-1", step=2, entry=b"again")  # overwriting an entry is fine
    assert client.hlen(store.keys(CID).journal) == 3
    store.delete(CID)


def test_delete_and_idle_ttl_cover_the_journal(client: redis.Redis, prefix: str) -> None:
    store = ConversationStore(client, prefix=prefix, limits=StoreLimits(idle_ttl_ms=60_000))
    store.accept(CID, b"p", "in-1")
    token = store.begin(CID, 10_000).token
    store.record_step(CID, token, "in-1", step=0, entry=b"r")
    assert 0 < client.pttl(store.keys(CID).journal) <= 60_000
    store.delete(CID)
    assert client.exists(store.keys(CID).journal) == 0


def test_stale_worker_entries_cannot_follow_a_takeover(store: ConversationStore, kit: StoreKit) -> None:
    """The kill case: a worker dies mid-turn, its lease runs out, another takes over and finds the journal."""
    store.accept(CID, b"p", "in-1")
    old = store.begin(CID, 50).token
    store.record_step(CID, old, "in-1", step=0, entry=b"round")
    kit.r.delete(store.keys(CID).lease)  # the lease ran out (the worker was killed)
    new = store.begin(CID, 10_000)
    assert new.status == "ok" and new.attempts == 2
    assert store.read_journal(CID, "in-1").rounds == {0: b"round"}
    try:
        store.record_step(CID, old, "in-1", step=0, call_id="c", entry=b"late")
        raise AssertionError("the killed worker's token still writes")
    except StaleLeaseError:
        pass
