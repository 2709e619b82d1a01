"""Timers (inputs held until they are due), on every backend: held durably, fired once in due order through the
accept checks, cancelled, dropped by a reset and a delete."""

from __future__ import annotations

import threading

import pytest
import redis

from worker.errors import InboxFullError
from worker.store.redis_store import ConversationStore, StoreLimits

CID = "447700900777"
T0 = 1_900_000_000_000  # a due time in ms, far from now: these tests pass their own clock


def hold(store: ConversationStore, i: int | str, due: int, *, cid: str = CID, reset: bool = False,
         inbound: bool = False) -> bool:
    return store.schedule(cid, f"payload-{i}".encode(), f"id-{i}", due, reset=reset, inbound=inbound).scheduled


def fire(store: ConversationStore, now: int, cid: str = CID) -> list[str]:
    """Fire the conversation as the timer loop does (with the index score it reads); the ids accepted."""
    rows = dict(store.due_conversations(now))
    if cid not in rows:
        return []
    return [i for i, _ in store.fire_due(cid, now, rows[cid]).fired]


def inbox_ids(store: ConversationStore, cid: str = CID) -> list[str]:
    return [i for i, _ in store.inbox(cid)]


def test_a_timer_is_held_until_due_then_joins_the_mailbox_in_due_order(store: ConversationStore) -> None:
    assert hold(store, "b", T0 + 200) and hold(store, "a", T0 + 100) and hold(store, "c", T0 + 300)
    assert store.inbox(CID) == [] and [t.message_id for t in store.scheduled(CID)] == ["id-a", "id-b", "id-c"]
    assert store.due_conversations(T0 + 99) == []
    assert fire(store, T0 + 250) == ["id-a", "id-b"]
    assert inbox_ids(store) == ["id-a", "id-b"] and store.inbox(CID)[0][1] == b"payload-a"
    assert [t.message_id for t in store.scheduled(CID)] == ["id-c"]
    assert store.due_conversations(T0 + 250) == []  # the index moved on to the next timer
    assert fire(store, T0 + 300) == ["id-c"]
    assert store.timer_conversations() == 0 and store.scheduled(CID) == []


def test_scheduling_one_id_twice_holds_one_and_an_accepted_id_is_a_duplicate(store: ConversationStore) -> None:
    first = store.schedule(CID, b"x", "nudge-1", T0)
    again = store.schedule(CID, b"y", "nudge-1", T0 + 5)
    assert first.scheduled and not first.duplicate and again.duplicate and not again.scheduled
    assert [(t.message_id, t.due_ms, t.envelope) for t in store.scheduled(CID)] == [("nudge-1", T0, b"x")]
    store.accept(CID, b"m", "wamid-1")
    assert store.schedule(CID, b"z", "wamid-1", T0).duplicate


def test_a_timer_whose_id_was_accepted_meanwhile_is_dropped_not_applied_twice(store: ConversationStore) -> None:
    hold(store, 1, T0)
    store.accept(CID, b"sent at once", "id-1")
    assert fire(store, T0) == [] and inbox_ids(store) == ["id-1"] and store.scheduled(CID) == []


def test_a_cancelled_timer_never_fires(store: ConversationStore) -> None:
    hold(store, 1, T0)
    hold(store, 2, T0 + 10)
    assert store.cancel_scheduled(CID, "id-1") is True
    assert store.cancel_scheduled(CID, "id-1") is False and store.cancel_scheduled(CID, "never") is False
    assert fire(store, T0 + 10) == ["id-2"] and inbox_ids(store) == ["id-2"]
    assert store.cancel_scheduled(CID, "id-2") is False  # due and accepted: too late to cancel


def test_a_full_mailbox_keeps_due_timers_held_and_they_fire_later(store: ConversationStore) -> None:
    for i in range(store.limits.max_inbox):
        store.accept(CID, b"m", f"m-{i}")
    hold(store, 1, T0)
    res = store.fire_due(CID, T0, dict(store.due_conversations(T0))[CID], retry_ms=1000)
    assert res.full and res.accepted == 0 and [t.message_id for t in store.scheduled(CID)] == ["id-1"]
    assert store.due_conversations(T0 + 999) == []  # looked at again after retry_ms, not on every pass
    store._client.lpop(store.keys(CID).inbox)
    assert fire(store, T0 + 1000) == ["id-1"] and inbox_ids(store)[-1] == "id-1"


def test_many_concurrent_passes_fire_each_timer_once(store: ConversationStore) -> None:
    for i in range(40):
        hold(store, i, T0 + i)
    results: list[list[str]] = []

    def one() -> None:
        results.append(fire(store, T0 + 100))

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    fired = [i for r in results for i in r]
    assert sorted(fired) == sorted(f"id-{i}" for i in range(40)) and len(fired) == 40
    assert inbox_ids(store) == [f"id-{i}" for i in range(40)]


def test_a_reset_timer_drops_the_timers_held_behind_it(store: ConversationStore) -> None:
    hold(store, "before", T0)
    hold(store, "reset", T0 + 10, reset=True)
    hold(store, "after-due", T0 + 20)
    hold(store, "later", T0 + 10_000)
    assert fire(store, T0 + 20) == ["id-before", "id-reset"]
    assert store.scheduled(CID) == [] and store.due_conversations(T0 + 100_000) == []


def test_delete_and_drop_forget_the_timers(store: ConversationStore) -> None:
    hold(store, 1, T0)
    hold(store, 2, T0, cid="447700900778")
    store.delete(CID)
    assert store.scheduled(CID) == [] and [c for c, _ in store.due_conversations(T0)] == ["447700900778"]
    assert store.accept("447700900778", b"reset", "reset-1", reset=True).accepted
    assert fire(store, T0, "447700900778") == [] and store.scheduled("447700900778") == []
    assert store.timer_conversations() == 0  # the early index entry was corrected by the pass


def test_a_reset_accepted_drops_the_timers_a_duplicate_or_refused_one_keeps_them(store: ConversationStore) -> None:
    """The drop is the accept's own step: a retried reset (a duplicate) keeps the timers held since the first one,
    and a reset refused for a full mailbox has not joined the order, so the timers it would have dropped stay."""
    hold(store, 1, T0)
    assert store.accept(CID, b"reset", "reset-1", reset=True).accepted and store.scheduled(CID) == []
    hold(store, 2, T0)
    assert store.accept(CID, b"reset", "reset-1", reset=True).duplicate
    with pytest.raises(InboxFullError):
        store.accept(CID, b"reset", "reset-2", max_inbox=1, reset=True)
    assert [t.message_id for t in store.scheduled(CID)] == ["id-2"] and inbox_ids(store) == ["reset-1"]
    assert store.accept(CID, b"reset", "reset-2", reset=True).accepted and store.scheduled(CID) == []


def test_a_timer_held_while_a_delete_runs_keeps_its_index_entry_and_fires(store: ConversationStore) -> None:
    """A game schedules a nudge for a conversation an operator is deleting: whichever lands first, a timer held
    after the delete's script is still in the due index (else it would be held for ever, never fired)."""
    hold(store, 1, T0)
    real = store._scripts.delete

    def delete_then_hold(**kw):  # type: ignore[no-untyped-def]
        out = real(**kw)
        hold(store, 2, T0 + 5)  # lands between the delete's script and what the delete does after it
        return out

    store._scripts.delete = delete_then_hold  # type: ignore[method-assign]
    store.delete(CID)
    assert [t.message_id for t in store.scheduled(CID)] == ["id-2"]
    assert fire(store, T0 + 5) == ["id-2"]


def test_the_timers_of_a_conversation_are_bounded(client: redis.Redis, prefix: str) -> None:
    store = ConversationStore(client, prefix=prefix, limits=StoreLimits(max_timers=2))
    hold(store, 1, T0)
    hold(store, 2, T0)
    with pytest.raises(InboxFullError, match="timers"):
        hold(store, 3, T0)
    assert len(store.scheduled(CID)) == 2


def test_a_fired_message_opens_the_window_when_it_joins(store: ConversationStore) -> None:
    hold(store, 1, T0, inbound=True)
    assert store.last_inbound(CID) is None
    fire(store, T0 + 5)
    assert store.last_inbound(CID) == pytest.approx((T0 + 5) / 1000)


def test_an_index_entry_left_early_costs_one_empty_pass(store: ConversationStore) -> None:
    hold(store, 1, T0)
    hold(store, 2, T0 + 60_000)
    store.cancel_scheduled(CID, "id-1")
    assert fire(store, T0 + 1) == []
    assert store.due_conversations(T0 + 59_999) == [] and fire(store, T0 + 60_000) == ["id-2"]


def test_a_timer_firing_behind_waiting_inputs_keeps_the_sweepers_idle_clock(store: ConversationStore) -> None:
    """As an accepted input (see the store contract): a timer that fires into a mailbox with inputs waiting only makes
    sure the sweeper's mark is there; restamping it would hide a dead worker's conversation while its timers fire.
    One that fires into an empty mailbox stamps the mark anew: work appeared."""
    pending = store.global_keys.pending
    store.accept(CID, b"waiting", "id-w")  # a dead worker's conversation: an input waits
    store._client.zadd(pending, {CID: 1})  # the mark, set long ago
    assert hold(store, "late", T0) and fire(store, T0 + 1) == ["id-late"]
    assert store._client.zscore(pending, CID) == 1
    other = "447700900778"
    store._client.zadd(pending, {other: 1})
    assert hold(store, "x", T0, cid=other) and fire(store, T0 + 1, cid=other) == ["id-x"]
    assert store._client.zscore(pending, other) > 1
