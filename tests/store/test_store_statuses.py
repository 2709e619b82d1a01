"""Delivery statuses in the store, on every backend: a message's status only moves forward whatever order the
webhooks come in, the record is bounded, and a status naming a reply part in flight is kept with that part."""

from __future__ import annotations

import itertools
import time

import pytest
import redis

from tests.store.test_store_contract import queue_reply
from tests.support.store_kit import raw
from worker.errors import StaleLeaseError
from worker.store.redis_store import ConversationStore, StoreLimits

CID = "447700900123"
FORWARD = ["sent", "delivered", "read"]


@pytest.mark.parametrize("order", list(itertools.permutations(FORWARD)))
def test_a_status_only_moves_forward_whatever_the_order(store: ConversationStore, order: tuple[str, ...]) -> None:
    moved = [store.record_status(CID, "wamid.A", s).moved for s in order]
    assert [st.status for st in store.statuses(CID)] == ["read"]
    # Each status moved it only when it ranked above everything before it.
    assert moved == [FORWARD.index(s) > max((FORWARD.index(p) for p in order[:i]), default=-1)
                     for i, s in enumerate(order)]


@pytest.mark.parametrize("before", [[], ["sent"], ["sent", "delivered"], ["read"]])
def test_failed_is_final(store: ConversationStore, before: list[str]) -> None:
    for s in before:
        store.record_status(CID, "wamid.A", s)
    failed = store.record_status(CID, "wamid.A", "failed", "131047: Re-engagement message")
    assert (failed.moved, failed.latest) == (True, "failed")
    for s in ["sent", "delivered", "read", "failed"]:  # late webhooks and Meta's retries of the failure
        late = store.record_status(CID, "wamid.A", s, "another detail")
        assert (late.moved, late.latest) == (False, "failed")
    [st] = store.statuses(CID)
    assert (st.provider_id, st.status, st.detail) == ("wamid.A", "failed", "131047: Re-engagement message")
    assert st.at_ms > 1_600_000_000_000


def test_an_unknown_status_is_kept_only_while_nothing_better_is(store: ConversationStore) -> None:
    assert store.record_status(CID, "wamid.A", "warning").latest == "warning"
    assert store.record_status(CID, "wamid.A", "sent").moved
    assert store.record_status(CID, "wamid.A", "deleted").latest == "sent"


def test_every_message_keeps_its_own_latest_status_in_order_of_first_status(store: ConversationStore) -> None:
    store.record_status(CID, "wamid.B", "sent")
    time.sleep(0.002)  # first statuses a millisecond apart: the order is by time (then by id)
    store.record_status(CID, "wamid.A", "read")
    store.record_status(CID, "wamid.B", "delivered")
    store.record_status("other", "wamid.A", "failed")  # another conversation's record is its own
    assert [(s.provider_id, s.status) for s in store.statuses(CID)] == [("wamid.B", "delivered"), ("wamid.A", "read")]
    assert [(s.provider_id, s.status) for s in store.statuses(CID, limit=1)] == [("wamid.A", "read")]


def test_the_record_is_bounded(client: redis.Redis, prefix: str) -> None:
    store = ConversationStore(client, prefix=prefix, limits=StoreLimits(statuses_max=3))
    for i in range(7):
        store.record_status(CID, f"wamid.{i}", "sent")
        time.sleep(0.002)
    store.record_status(CID, "wamid.6", "read")
    assert [(s.provider_id, s.status) for s in store.statuses(CID)] == [
        ("wamid.4", "sent"), ("wamid.5", "sent"), ("wamid.6", "read")]
    k = store.keys(CID)
    assert client.hlen(k.statuses) == client.zcard(k.statusorder) == 3


def test_the_log_of_earlier_versions_gives_way(store: ConversationStore, client: redis.Redis) -> None:
    """Before statuses moved forward only, they were a capped list under the same key."""
    k = store.keys(CID)
    client.rpush(k.statuses, b"wamid.old\tsent\t1700000000\t")
    assert store.record_status(CID, "wamid.A", "delivered").moved
    assert [(s.provider_id, s.status) for s in store.statuses(CID)] == [("wamid.A", "delivered")]


def test_a_status_naming_the_part_in_flight_is_kept_with_it(store: ConversationStore) -> None:
    queue_reply(store, CID, 1)
    t, head = store.begin_delivery(CID, 10_000)
    assert t and head is not None and head.part == 0
    sent = raw(store).hgetall
    k = store.keys(CID)
    # Another reply's part, or another part of this one: not the part in flight, nothing kept with it.
    assert not store.record_status(CID, "wamid.X", "sent", reply_id="id-0", part=0).for_part
    assert not store.record_status(CID, "wamid.Y", "sent", reply_id="id-1", part=1).for_part
    assert b"seen" not in sent(k.sent)
    # Read first, then Meta's late `sent`: the part keeps the best one, with its message id.
    assert store.record_status(CID, "wamid.P", "read", reply_id="id-1", part=0).for_part
    assert store.record_status(CID, "wamid.P", "sent", reply_id="id-1", part=0).for_part
    progress = sent(k.sent)
    assert (progress[b"seen_part"], progress[b"seen"], progress[b"seen_id"]) == (b"id-1:0", b"read", b"wamid.P")
    # Once the part is marked sent it is no longer in flight: later statuses go to the message's record only.
    store.mark_sent(CID, t, "id-1", 0, "wamid.P")
    assert not store.record_status(CID, "wamid.P", "delivered", reply_id="id-1", part=0).for_part
    assert {s.provider_id: s.status for s in store.statuses(CID)}["wamid.P"] == "read"


def test_what_is_known_of_a_part_left_in_flight(store: ConversationStore) -> None:
    queue_reply(store, CID, 1)
    t, head = store.begin_delivery(CID, 10_000)
    assert t and head is not None
    first = store.inflight_outcome(CID, t, "id-1", 0)  # the first look starts the clock
    assert (first.status, first.provider_id, first.waited_ms) == (None, None, 0)
    time.sleep(0.05)
    store.record_status(CID, "wamid.P", "sent", reply_id="id-1", part=0)
    later = store.inflight_outcome(CID, t, "id-1", 0)
    assert (later.status, later.provider_id) == ("sent", "wamid.P") and 40 <= later.waited_ms < 5000
    # Another part (not in flight) is not decided here; a stale token or a reply that left the head is refused.
    assert store.inflight_outcome(CID, t, "id-1", 1).status is None
    with pytest.raises(StaleLeaseError):
        store.inflight_outcome(CID, t + 1, "id-1", 0)
    with pytest.raises(StaleLeaseError):
        store.inflight_outcome(CID, t, "id-0", 0)


def test_the_clock_of_a_part_in_flight_is_its_own(store: ConversationStore) -> None:
    """After part 0 was settled and part 1 was left in flight in turn, part 1's grace starts afresh."""
    queue_reply(store, CID, 1)
    t, _ = store.begin_delivery(CID, 10_000)
    assert t
    store.inflight_outcome(CID, t, "id-1", 0)
    time.sleep(0.05)
    store.mark_sent(CID, t, "id-1", 0, "wamid.P")
    store.mark_inflight(CID, t, "id-1", 1)
    assert store.inflight_outcome(CID, t, "id-1", 1).waited_ms == 0
