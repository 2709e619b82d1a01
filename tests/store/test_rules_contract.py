"""The platform's rules in the store, on every backend: the player's last message (the customer-service window's
clock) and the shared pace (one GCRA script over the sender number's bucket and a recipient's)."""

from __future__ import annotations

import time

import pytest
import redis

from tests.store.conftest import make_client
from worker.errors import InboxFullError
from worker.store.keys import PaceKeys
from worker.store.redis_store import ConversationStore, Pace, PaceLimits, StoreLimits

CID = "447700900123"
SENDER = "106540352242922"


# --- the last inbound message --------------------------------------------------------------------------

def test_a_players_message_records_when_it_was_accepted(store: ConversationStore) -> None:
    assert store.last_inbound(CID) is None
    before = time.time()
    store.accept(CID, b"m1", "wamid.1", inbound=True)
    at = store.last_inbound(CID)
    assert at is not None and before - 0.01 <= at <= time.time() + 0.01


def test_other_inputs_and_duplicates_leave_it_alone(store: ConversationStore, client: redis.Redis) -> None:
    store.accept(CID, b"event", "evt-1")  # a game event, a splice, a producer's notice
    assert store.last_inbound(CID) is None
    store.accept(CID, b"m1", "wamid.1", inbound=True)
    first = store.last_inbound(CID)
    time.sleep(0.01)
    assert store.accept(CID, b"m1", "wamid.1", inbound=True).duplicate  # Meta's retry of the same webhook
    assert store.last_inbound(CID) == first
    store.accept(CID, b"m2", "wamid.2", inbound=True)
    later = store.last_inbound(CID)
    assert later is not None and first is not None and later > first


def test_it_only_moves_forward(store: ConversationStore, client: redis.Redis) -> None:
    """A producer whose call lands late (its clock behind) cannot close a window a newer message opened."""
    k = store.keys(CID)
    future_ms = int(time.time() * 1000) + 60_000
    client.set(k.inbound, future_ms)
    store.accept(CID, b"m1", "wamid.1", inbound=True)
    assert store.last_inbound(CID) == future_ms / 1000


def test_a_message_refused_for_a_full_mailbox_still_opened_the_window(client: redis.Redis, prefix: str) -> None:
    store = ConversationStore(client, prefix=prefix, limits=StoreLimits(max_inbox=1))
    store.accept(CID, b"m1", "wamid.1")
    with pytest.raises(InboxFullError):
        store.accept(CID, b"m2", "wamid.2", inbound=True)
    assert store.last_inbound(CID) is not None


def test_every_claim_reads_it_with_the_head(store: ConversationStore) -> None:
    """The deliverer learns the window's clock from the claim itself (no round trip of its own): the commit that
    starts a delivery, begin_delivery, claim_next and the claim after a sent reply all carry it, equal to what
    last_inbound says, and a claim with no message known says None."""
    store.accept(CID, b"event", "evt-1")  # not from the player: the window stays unknown
    lease = store.begin(CID, 10_000)
    assert lease.snapshot is not None
    started = store.commit(CID, lease.token, expected_version=0, input_id="evt-1", new_state=b"s", reply=b"r1",
                           claim_delivery_ms=10_000)
    assert started.delivery is not None
    token, head = started.delivery
    assert head.last_inbound is None
    store.accept(CID, b"m1", "wamid.1", inbound=True)
    store.accept(CID, b"m2", "wamid.2", inbound=True)
    at = store.last_inbound(CID)
    assert at is not None
    lease = store.begin(CID, 10_000)
    handed_on = store.commit(CID, lease.token, expected_version=1, input_id="wamid.1", new_state=b"s", reply=b"r2")
    assert handed_on.next is not None  # wamid.2 waits: the lease stays ours for it
    nxt = store.sent_last_claim_next(CID, token, head.reply_id, "wamid.out1", 10_000)
    assert nxt is not None and nxt.reply_id == "wamid.1" and nxt.last_inbound == at
    store.release_delivery(CID, token)
    token2, again = store.begin_delivery(CID, 10_000)
    assert token2 is not None and again is not None and again.last_inbound == at
    store.dead_letter_reply(CID, token2, again.reply_id, b"dead")
    store.commit(CID, lease.token, expected_version=2, input_id="wamid.2", new_state=b"s", reply=b"r3")
    claimed = store.claim_next(CID, token2, 10_000)
    assert claimed is not None and claimed.reply_id == "wamid.2" and claimed.last_inbound == at


def test_delete_and_the_idle_ttl_cover_it(client: redis.Redis, prefix: str) -> None:
    store = ConversationStore(client, prefix=prefix, limits=StoreLimits(idle_ttl_ms=60_000))
    store.accept(CID, b"m1", "wamid.1", inbound=True)
    assert 0 < client.pttl(store.keys(CID).inbound) <= 60_000
    store.delete(CID)
    assert store.last_inbound(CID) is None and client.exists(store.keys(CID).inbound) == 0


# --- the pace ------------------------------------------------------------------------------------------

def test_the_buckets_share_the_sender_numbers_hash_tag() -> None:
    k = PaceKeys("p", SENDER)
    assert k.rate == "p:{wa:106540352242922}:rate"
    assert k.recipient(CID) == "p:{wa:106540352242922}:to:447700900123"
    hostile = k.recipient("a}{b:*")  # a recipient is any string a producer passed
    assert hostile.startswith("p:{wa:106540352242922}:to:h.") and hostile.count("{") == 1


def test_a_burst_goes_at_once_then_sends_are_spaced(store: ConversationStore) -> None:
    limits = PaceLimits(per_second=10, burst=3, recipient_per_second=0)
    waits, slots = [], []
    for i in range(5):
        waits.append(store.pace(SENDER, f"r{i}", limits, max_wait=5))
        slots.append(time.monotonic() + waits[-1].wait)  # when the send may go, give or take one round trip
    assert all(p.reserved for p in waits)
    assert [p.wait for p in waits[:3]] == [0, 0, 0]
    # Then slots reserved back to back, 0.1 s apart (the burst's tolerance counted from the first send).
    assert 0 < waits[3].wait <= 0.1 and abs(slots[4] - slots[3] - 0.1) < 0.04
    assert waits[3].by == "number" and waits[0].by == "none"


def test_the_recipient_limit_holds_one_player_and_not_the_others(store: ConversationStore) -> None:
    limits = PaceLimits(per_second=1000, burst=10, recipient_per_second=1, recipient_burst=2)
    a = [store.pace(SENDER, "alice", limits, max_wait=5) for _ in range(3)]
    assert [p.wait for p in a[:2]] == [0, 0] and [p.reserved for p in a] == [True, True, False]
    assert 0.7 < a[2].wait <= 1.0 and a[2].by == "recipient"
    # Alice's wait reserved nothing, so it holds nobody else back on the number.
    assert store.pace(SENDER, "bob", limits, max_wait=5).wait == 0


def test_a_recipients_wait_is_never_reserved(store: ConversationStore) -> None:
    limits = PaceLimits(per_second=0, recipient_per_second=4, recipient_burst=1)
    assert store.pace(SENDER, "alice", limits, max_wait=5).wait == 0
    refused = [store.pace(SENDER, "alice", limits, max_wait=5) for _ in range(3)]
    assert not any(p.reserved for p in refused) and {p.by for p in refused} == {"recipient"}
    # Nothing was taken: the wait stays under one interval instead of growing with each ask.
    assert all(0.1 < p.wait <= 0.25 for p in refused)
    time.sleep(refused[-1].wait)
    assert store.pace(SENDER, "alice", limits, max_wait=5) == Pace(True, 0.0, "none")


def test_a_number_wait_beyond_max_wait_takes_nothing(store: ConversationStore) -> None:
    limits = PaceLimits(per_second=2, burst=1, recipient_per_second=0)
    assert store.pace(SENDER, "a", limits, max_wait=0.1).wait == 0
    refused = [store.pace(SENDER, "b", limits, max_wait=0.1) for _ in range(3)]
    assert not any(p.reserved for p in refused) and all(0.3 < p.wait <= 0.5 for p in refused)
    reserved = store.pace(SENDER, "b", limits, max_wait=1)
    assert reserved.reserved and 0.3 < reserved.wait <= 0.5 and reserved.by == "number"


def test_off_limits_take_no_key(store: ConversationStore, client: redis.Redis, prefix: str) -> None:
    p = store.pace(SENDER, "alice", PaceLimits(per_second=0, recipient_per_second=0), max_wait=0)
    assert p.reserved and p.wait == 0
    assert list(client.scan_iter(match=f"{prefix}:*")) == []


def test_buckets_expire_once_idle(store: ConversationStore, client: redis.Redis) -> None:
    store.pace(SENDER, "alice", PaceLimits(per_second=10, burst=1, recipient_per_second=1, recipient_burst=1),
               max_wait=1)
    k = PaceKeys(store.prefix, SENDER)
    assert 0 < client.pttl(k.rate) <= 101 and 0 < client.pttl(k.recipient("alice")) <= 1001


def test_every_client_shares_one_schedule(client: redis.Redis, prefix: str, backend: str) -> None:
    """Two workers (two stores over their own connections) draw from the same buckets."""
    # A second connection to the same server (fakeredis's server lives in this process: share its client).
    other_client = client if backend == "fakeredis" else make_client(backend)
    one, two = ConversationStore(client, prefix=prefix), ConversationStore(other_client, prefix=prefix)
    limits = PaceLimits(per_second=10, burst=1, recipient_per_second=0)
    waits = [s.pace(SENDER, "x", limits, max_wait=5).wait for s in (one, two, one, two)]
    assert waits[0] == 0 and waits == sorted(waits) and waits[3] > 0.25


def test_no_more_than_the_rate_goes_in_any_second(store: ConversationStore) -> None:
    """The bound GCRA promises whatever the order calls land in: in any window of L seconds at most rate * L +
    burst sends are scheduled."""
    limits = PaceLimits(per_second=50, burst=5, recipient_per_second=0)
    start = time.monotonic()
    slots = sorted(time.monotonic() - start + store.pace(SENDER, f"r{i % 7}", limits, max_wait=10).wait
                   for i in range(120))
    for i, s in enumerate(slots):
        within = [t for t in slots[i:] if t < s + 1.0]
        assert len(within) <= 50 + 5, (s, len(within))
