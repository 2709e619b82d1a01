"""Pauses, on every backend: a pause until resumed, a timed pause that ends by itself (the key's TTL), a second
pause replacing the first, the fleet-wide count the gauge reads, and delete dropping the pause."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from worker.store.limits import StoreLimits
from worker.store.redis_store import ConversationStore

A, B = "447700900001", "447700900002"


def test_a_pause_holds_until_resumed(store: ConversationStore) -> None:
    assert store.paused(A) is None and store.paused_count() == 0
    assert store.pause(A).until is None
    assert store.paused(A) is not None and store.paused(A).until is None  # type: ignore[union-attr]
    assert store.paused(B) is None  # one conversation's pause is its own
    assert store.paused_count() == 1
    assert store.resume(A) is True and store.resume(A) is False
    assert store.paused(A) is None and store.paused_count() == 0


def test_a_timed_pause_ends_by_itself_and_leaves_the_count(store: ConversationStore) -> None:
    until = store.pause(A, 0.3).until
    assert until is not None and time.time() < until <= time.time() + 0.3
    store.pause(B, 60)
    assert store.paused_count() == 2
    got = store.paused(A)
    assert got is not None and abs((got.until or 0) - until) < 0.002
    time.sleep(0.4)
    assert store.paused(A) is None and store.paused_count() == 1


def test_a_second_pause_replaces_the_first(store: ConversationStore) -> None:
    store.pause(A, 0.2)
    store.pause(A)  # now until resumed: the TTL is gone
    time.sleep(0.3)
    assert store.paused(A) is not None and store.paused_count() == 1
    store.pause(A, 60)
    assert (store.paused(A).until or 0) > time.time() + 50  # type: ignore[union-attr]
    assert store.paused_count() == 1


def test_delete_drops_the_pause(store: ConversationStore) -> None:
    store.accept(A, b"x", "x-1")
    store.pause(A)
    store.delete(A)
    assert store.paused(A) is None and store.paused_count() == 0


def test_an_idle_conversation_takes_its_pause_with_it(client: redis.Redis, prefix: str) -> None:
    """With the idle TTL on, a pause until resumed lives as long as its conversation (each input refreshes it) and
    expires with it: the player's next conversation, months later, is not held for an operator nobody assigned."""
    store = ConversationStore(client, prefix=prefix, limits=StoreLimits(idle_ttl_ms=400))
    store.pause(A)
    store.accept(A, b"x", "x-1")  # the player writes while paused: the pause's key now expires with the rest
    assert 0 < client.pttl(store.keys(A).paused) <= 400
    assert store.paused(A) is not None and store.paused_count() == 1
    time.sleep(0.6)
    assert client.exists(store.keys(A).state, store.keys(A).inbox, store.keys(A).paused) == 0
    assert store.paused(A) is None and store.paused_count() == 0


def test_a_pause_nobody_writes_to_after_expires_with_the_idle_conversation(client: redis.Redis, prefix: str) -> None:
    """With the idle TTL on, a pause until resumed of a conversation that gets no input after it (the player left,
    or the conversation never started: a typo in the id) expires like an idle conversation, and leaves the count."""
    store = ConversationStore(client, prefix=prefix, limits=StoreLimits(idle_ttl_ms=400))
    store.accept(A, b"x", "x-1")
    store.pause(A)
    store.pause(B)  # no input ever
    assert 0 < client.pttl(store.keys(A).paused) <= 400 and 0 < client.pttl(store.keys(B).paused) <= 400
    assert store.paused_count() == 2
    time.sleep(0.6)
    assert store.paused(A) is None and store.paused(B) is None and store.paused_count() == 0


def test_resume_after_a_timed_pause_ended_says_it_was_not_paused(client: redis.Redis, prefix: str) -> None:
    store = ConversationStore(client, prefix=prefix, limits=StoreLimits(idle_ttl_ms=60_000))
    store.pause(A, 0.2)
    store.accept(A, b"x", "x-1")  # the idle TTL, longer than the pause, keeps the key past the pause's end
    time.sleep(0.3)
    assert store.paused(A) is None
    assert store.resume(A) is False
    store.delete(A)


def test_the_count_agrees_with_the_pause_when_a_pause_and_a_resume_race(store: ConversationStore) -> None:
    """A pause and a resume sent at the same moment (two operators): whichever wins, the count says the same as the
    conversation's pause once both are done. Each writes its key and the index in one transaction; a Cluster, where
    the two are in different slots, cannot (docs/known-limits.md)."""
    import threading

    if store._cluster:
        pytest.skip("a Cluster writes the key and the index apart: the bound is documented, not removed")
    start, done = threading.Barrier(3), threading.Barrier(3)
    rounds = 150

    def loop(act: Callable[[], object]) -> None:
        for _ in range(rounds):
            start.wait()
            act()
            done.wait()

    threads = [threading.Thread(target=loop, args=(lambda: store.pause(A),)),
               threading.Thread(target=loop, args=(lambda: store.resume(A),))]
    for t in threads:
        t.start()
    disagreed = 0
    for _ in range(rounds):
        start.wait()
        done.wait()
        disagreed += store.paused_count() != (store.paused(A) is not None)
    for t in threads:
        t.join()
    assert disagreed == 0
