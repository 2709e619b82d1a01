"""The accept's own wake-up (issue 33), on every backend: the script pushes the message it is handed onto the broker's
queue exactly when the producers' rule says the input needs a wake-up (``worker.queue.wakeup.wake_needed``), in the
same step; never for a duplicate or a full mailbox; on a Cluster never (the queue is in another slot: the producer
publishes as before)."""

from __future__ import annotations

import pytest
import redis

from worker.errors import InboxFullError
from worker.queue.wakeup import wake_needed
from worker.store.answers import AcceptResult, WakePush
from worker.store.redis_store import ConversationStore

CID = "447700900778"


@pytest.fixture
def queue(prefix: str) -> str:
    return f"{prefix}:broker-queue"  # under the test's prefix: deleted afterwards


def pushed(client: redis.Redis, queue: str) -> list[bytes]:
    return list(reversed(client.lrange(queue, 0, -1)))  # in push order


def needs_wake(result: AcceptResult, *, coalesce: bool = True) -> bool:
    return wake_needed(accepted=result.accepted, was_empty=result.depth == 1, ended_hold=result.ended_hold,
                       every=not coalesce)


def test_the_first_input_waiting_pushes_the_wake_up_and_no_other(store: ConversationStore, client: redis.Redis,
                                                                  queue: str, backend: str) -> None:
    if backend == "cluster":
        pytest.skip("a Cluster store pushes none (test_a_cluster_store_pushes_none)")
    results = [store.accept(CID, f"m{i}".encode(), f"id-{i}", wake=WakePush(queue, f"wake-{i}".encode()))
               for i in range(3)]
    again = store.accept(CID, b"m0", "id-0", wake=WakePush(queue, b"wake-dup"))
    other = store.accept("447700900779", b"x", "other-0", wake=WakePush(queue, b"wake-other"))
    assert [r.woken for r in results] == [True, False, False] == [needs_wake(r) for r in results]
    assert again.duplicate and not again.woken and not needs_wake(again)
    assert other.woken
    assert pushed(client, queue) == [b"wake-0", b"wake-other"]


def test_without_coalescing_every_accepted_input_pushes(store: ConversationStore, client: redis.Redis, queue: str,
                                                        backend: str) -> None:
    if backend == "cluster":
        pytest.skip("a Cluster store pushes none")
    results = [store.accept(CID, b"m", f"id-{i}", wake=WakePush(queue, f"w{i}".encode(), every=True))
               for i in range(3)]
    assert store.accept(CID, b"m", "id-1", wake=WakePush(queue, b"dup", every=True)).woken is False
    assert [r.woken for r in results] == [True] * 3 == [needs_wake(r, coalesce=False) for r in results]
    assert pushed(client, queue) == [b"w0", b"w1", b"w2"]


def test_an_event_that_ends_a_bursts_hold_pushes(store: ConversationStore, client: redis.Redis, queue: str,
                                                 backend: str) -> None:
    if backend == "cluster":
        pytest.skip("a Cluster store pushes none")
    store.accept(CID, b"hi", "id-0")
    begin = store.begin(CID, 10_000)
    store.defer(CID, begin.token, "id-0", 60_000)  # the burst's quiet period
    plain = store.accept(CID, b"more", "id-1", wake=WakePush(queue, b"no"))
    ends = store.accept(CID, b"event", "id-2", ends_burst=True, wake=WakePush(queue, b"yes"))
    assert (plain.woken, ends.ended_hold, ends.woken) == (False, True, True)
    assert [needs_wake(plain), needs_wake(ends)] == [False, True]
    assert pushed(client, queue) == [b"yes"]


def test_a_full_mailbox_pushes_nothing(store: ConversationStore, client: redis.Redis, queue: str,
                                       backend: str) -> None:
    if backend == "cluster":
        pytest.skip("a Cluster store pushes none")
    store.accept(CID, b"m", "id-0", max_inbox=1, wake=WakePush(queue, b"first"))
    with pytest.raises(InboxFullError):
        store.accept(CID, b"m", "id-1", max_inbox=1, wake=WakePush(queue, b"refused", every=True))
    assert pushed(client, queue) == [b"first"]


def test_a_cluster_store_pushes_none(store: ConversationStore, client: redis.Redis, queue: str,
                                     backend: str) -> None:
    if backend != "cluster":
        pytest.skip("Cluster only")
    result = store.accept(CID, b"m", "id-0", wake=WakePush(queue, b"never"))
    assert result.accepted and result.depth == 1 and not result.woken and needs_wake(result)
    assert client.llen(queue) == 0
