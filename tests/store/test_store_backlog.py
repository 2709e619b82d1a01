"""The autoscaling signals' read side, on every backend: waiting conversations and the oldest waiting input's age,
sampled from the sweeper's set; and the hand-back (a defer with no hold) the fair drain relies on."""

from __future__ import annotations

import time

from worker.store.redis_store import ConversationStore


def test_an_empty_store_has_no_backlog(store: ConversationStore) -> None:
    b = store.backlog()
    assert (b.waiting, b.oldest_age_s, b.total) == (0, 0.0, 0)


def test_waiting_conversations_and_the_age_of_the_oldest_input(store: ConversationStore) -> None:
    store.accept("447700900001", b"a", "a-1")
    time.sleep(0.25)
    store.accept("447700900002", b"b", "b-1")
    store.accept("447700900001", b"a", "a-2")  # a second input does not make its conversation's head younger
    b = store.backlog()
    assert b.waiting == 2 and b.total == 2 and b.sampled == 2
    assert 0.25 <= b.oldest_age_s < 5


def test_a_conversation_whose_inputs_were_applied_no_longer_waits(store: ConversationStore) -> None:
    store.accept("447700900001", b"a", "a-1")
    store.accept("447700900002", b"b", "b-1")
    begin = store.begin("447700900001", 10_000)
    assert begin.snapshot is not None
    store.commit("447700900001", begin.token, expected_version=begin.snapshot.version, input_id="a-1",
                 new_state=b"s")
    assert store.backlog().waiting == 1


def test_a_sample_smaller_than_the_set_scales_the_count(store: ConversationStore) -> None:
    for i in range(10):
        store.accept(f"4477009000{i:02d}", b"x", f"x-{i}")
    b = store.backlog(sample=5)
    assert b.sampled == 5 and b.total == 10 and b.waiting == 10


def test_a_hand_back_frees_the_lease_holds_nothing_and_gives_the_attempt_back(store: ConversationStore) -> None:
    cid = "447700900003"
    store.accept(cid, b"1", "i-1")
    store.accept(cid, b"2", "i-2")
    begin = store.begin(cid, 10_000)
    assert begin.snapshot is not None and begin.attempts == 1
    store.defer(cid, begin.token, "i-1", 0)
    again = store.begin(cid, 10_000)  # not "held", not "busy"
    assert again.status == "ok" and again.attempts == 1
