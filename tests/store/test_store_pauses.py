"""Pauses, on every backend: a pause until resumed, a timed pause that ends by itself (the key's TTL), a second
pause replacing the first, the fleet-wide count the gauge reads, and delete dropping the pause."""

from __future__ import annotations

import time

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
