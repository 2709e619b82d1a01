"""The store's side of bursts, on every backend: peeking past the head, committing several inputs at once,
deferring a burst without counting an attempt, recording which inputs a burst turn took in, and a game event the
model answers ending a burst's hold when it is accepted or fired."""

from __future__ import annotations

import time

import pytest

from tests.support.store_kit import raw
from worker.errors import StaleLeaseError
from worker.store.redis_store import ConversationStore

CID = "447700900777"


def _fill(store: ConversationStore, n: int) -> None:
    for i in range(n):
        store.accept(CID, f"payload-{i}".encode(), f"id-{i}")


def test_begin_peeks_at_the_inputs_after_the_head(store: ConversationStore) -> None:
    _fill(store, 4)
    begin = store.begin(CID, 10_000, peek=2)
    assert begin.snapshot is not None and begin.snapshot.input_id == "id-0"
    assert begin.snapshot.after == (("id-1", b"payload-1"), ("id-2", b"payload-2"))


def test_begin_without_peek_returns_nothing_after(store: ConversationStore) -> None:
    _fill(store, 3)
    begin = store.begin(CID, 10_000)
    assert begin.snapshot is not None and begin.snapshot.after == ()


def test_a_burst_commit_applies_every_input_it_names_at_once(store: ConversationStore) -> None:
    _fill(store, 5)
    begin = store.begin(CID, 10_000, peek=4)
    assert begin.snapshot is not None
    done = store.commit(CID, begin.token, expected_version=0, input_id="id-0", new_state=b"s", reply=b"r",
                        also=["id-1", "id-2"], peek=1)
    assert done.depth == 2 and done.next is not None and done.next.input_id == "id-3"
    assert done.next.after == (("id-4", b"payload-4"),)
    # each input applied once: none of them is at the head again, and their attempts are gone
    assert store.read_state(CID).blob == b"s"


def test_a_burst_commit_is_refused_when_an_input_is_not_where_it_was(store: ConversationStore) -> None:
    _fill(store, 3)
    begin = store.begin(CID, 10_000, peek=2)
    with pytest.raises(StaleLeaseError):
        store.commit(CID, begin.token, expected_version=0, input_id="id-0", new_state=b"s", also=["id-2"])
    with pytest.raises(StaleLeaseError):
        store.commit(CID, begin.token, expected_version=0, input_id="id-0", new_state=b"s",
                     also=["id-1", "id-2", "id-3"])  # past the end of the mailbox
    assert store.read_state(CID).version == 0  # nothing changed
    done = store.commit(CID, begin.token, expected_version=0, input_id="id-0", new_state=b"s", also=["id-1", "id-2"])
    assert done.released


def test_defer_gives_the_attempt_back(store: ConversationStore) -> None:
    _fill(store, 1)
    for _ in range(8):  # more deferrals than max_attempts: none of them may count as a crash
        begin = store.begin(CID, 10_000)
        assert begin.status == "ok" and begin.attempts == 1  # the lease was given up and the attempt given back
        store.defer(CID, begin.token, "id-0", 1)  # a 1 ms hold
        time.sleep(0.005)


def _held_burst(store: ConversationStore) -> None:
    """A player's message at the head, its burst's quiet period being waited out (DEFER's hold)."""
    _fill(store, 1)
    begin = store.begin(CID, 10_000)
    store.defer(CID, begin.token, "id-0", 60_000)
    assert store.begin(CID, 10_000).status == "held"


def test_defer_holds_drains_off_until_the_hold_ends(store: ConversationStore) -> None:
    _held_burst(store)


def test_defer_is_refused_to_a_stale_lease(store: ConversationStore) -> None:
    _fill(store, 1)
    begin = store.begin(CID, 10_000)
    store.release(CID, begin.token)
    newer = store.begin(CID, 10_000)
    with pytest.raises(StaleLeaseError):
        store.defer(CID, begin.token, "id-0", 60_000)
    assert store.begin(CID, 10_000).status == "busy"  # the newer holder keeps its lease, nothing is held
    assert newer.token > begin.token


def test_the_burst_a_turn_took_in_is_recorded_and_read_back(store: ConversationStore) -> None:
    _fill(store, 3)
    begin = store.begin(CID, 10_000)
    assert store.read_journal(CID, "id-0").burst is None
    assert store.record_burst(CID, begin.token, "id-0", ["id-0", "id-1", "id-2"])
    assert store.read_journal(CID, "id-0").burst == ("id-0", "id-1", "id-2")
    store.commit(CID, begin.token, expected_version=0, input_id="id-0", new_state=b"s", also=["id-1", "id-2"])
    assert store.read_journal(CID, "id-0").burst is None  # the commit that applied the burst deleted it


def test_record_burst_is_fenced(store: ConversationStore) -> None:
    _fill(store, 2)
    begin = store.begin(CID, 10_000)
    store.release(CID, begin.token)
    store.begin(CID, 10_000)
    with pytest.raises(StaleLeaseError):
        store.record_burst(CID, begin.token, "id-0", ["id-0", "id-1"])


def test_a_responding_events_accept_ends_a_burst_hold_and_a_plain_one_does_not(store: ConversationStore) -> None:
    _held_burst(store)
    plain = store.accept(CID, b"a silent event", "evt-1")
    assert plain.accepted and not plain.ended_hold
    assert store.begin(CID, 10_000).status == "held"  # a plain input leaves the quiet period running
    answered = store.accept(CID, b"an event the model answers", "evt-2", ends_burst=True)
    assert answered.accepted and answered.ended_hold and answered.depth == 3
    begin = store.begin(CID, 10_000, peek=2)  # drained now: the burst's head first, then what came after it
    assert begin.status == "ok" and begin.snapshot is not None and begin.snapshot.input_id == "id-0"
    assert [i for i, _ in begin.snapshot.after] == ["evt-1", "evt-2"]


def test_a_responding_event_leaves_a_retrys_hold_and_a_duplicate_ends_nothing(store: ConversationStore) -> None:
    _fill(store, 1)
    store.hold(CID, 60_000)  # a retry's backoff: not the event's to cut
    res = store.accept(CID, b"an event the model answers", "evt-1", ends_burst=True)
    assert res.accepted and not res.ended_hold and store.begin(CID, 10_000).status == "held"
    raw(store).delete(store.keys(CID).hold)
    _held_burst(store)
    again = store.accept(CID, b"an event the model answers", "evt-1", ends_burst=True)
    assert again.duplicate and not again.ended_hold and store.begin(CID, 10_000).status == "held"


def test_a_fired_responding_event_ends_a_burst_hold_and_a_fired_plain_one_does_not(store: ConversationStore) -> None:
    _held_burst(store)
    due = int(time.time() * 1000) - 1
    store.schedule(CID, b"a silent event", "evt-1", due)
    store.schedule(CID, b"an event the model answers", "evt-2", due + 1_000_000, ends_burst=True)
    first = store.fire_due(CID, due, due)
    assert [i for i, _ in first.fired] == ["evt-1"] and not first.ended_hold
    assert store.begin(CID, 10_000).status == "held"
    second = store.fire_due(CID, due + 1_000_000, due + 1_000_000)
    assert [i for i, _ in second.fired] == ["evt-2"] and second.ended_hold
    assert store.begin(CID, 10_000).status == "ok"
