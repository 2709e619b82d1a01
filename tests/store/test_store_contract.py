"""The store's contract, on every backend."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from tests.support.store_kit import StoreKit, raw
from worker.envelopes.addresses import validate_conversation_id
from worker.errors import InboxFullError, InvalidConversationIdError, StaleLeaseError, StoreUnavailableError
from worker.store.keys import ConversationKeys
from worker.store.redis_store import ConversationStore, StoreLimits

CID = "447700900123"


def accept(store: ConversationStore, cid: str, i: int | str) -> None:
    store.accept(cid, f"payload-{i}".encode(), f"id-{i}")


def apply_one(store: ConversationStore, cid: str, token: int, *, state: bytes | None = b"s", reply: bytes | None = None):  # type: ignore[no-untyped-def]
    snap = StoreKit(store).head(cid)
    assert snap.input_id is not None
    return store.commit(cid, token, expected_version=snap.version, input_id=snap.input_id, new_state=state,
                        reply=reply, trace=b"t:" + snap.input_id.encode())


# --- keys ---------------------------------------------------------------------------------------------

def test_every_key_name_has_a_typed_attribute() -> None:
    import dataclasses

    from worker.store.keys import NAMES

    k = ConversationKeys("p", "447700900123")
    assert {f.name for f in dataclasses.fields(ConversationKeys) if not f.init} == set(NAMES)
    assert k.inbox == "p:{447700900123}:inbox" and k.all() == [getattr(k, n) for n in NAMES]


@pytest.mark.parametrize("bad", ["", "*", "a*", "{x}", "a:b", "a b", "a\nb", "x" * 129, "x" * 10_000, "café",
                                 "ünï", "a?b", "[a]", "a\x00b", None, 5])
def test_hostile_conversation_ids_are_refused(bad: object, store: ConversationStore) -> None:
    with pytest.raises(InvalidConversationIdError):
        validate_conversation_id(bad)
    with pytest.raises(InvalidConversationIdError):
        store.accept(bad, b"x", "id")  # type: ignore[arg-type]


@pytest.mark.parametrize("good", ["447700900123", "US.13491208655302741918", "game-42_team=owls", "a@b+c", "x" * 128])
def test_good_ids(good: str) -> None:
    assert validate_conversation_id(good) == good


def test_keys_share_one_hash_tag_and_never_collide() -> None:
    a, b = ConversationKeys("p", "ab"), ConversationKeys("p", "a")
    assert all("{ab}" in k for k in a.all())
    assert not set(a.all()) & set(b.all())
    assert len(set(a.all())) == len(a.all())


# --- accept and dedupe --------------------------------------------------------------------------------

def test_accept_dedupes_by_message_id(store: ConversationStore) -> None:
    r1 = store.accept(CID, b"hello", "wamid.1")
    r2 = store.accept(CID, b"hello again", "wamid.1")
    assert (r1.accepted, r1.duplicate, r1.depth) == (True, False, 1)
    assert (r2.accepted, r2.duplicate, r2.depth) == (False, True, 1)
    assert store.inbox(CID) == [("wamid.1", b"hello")]


def test_duplicates_stay_ignored_after_the_input_was_applied(store: ConversationStore, kit: StoreKit) -> None:
    store.accept(CID, b"x", "wamid.1")
    lease = kit.acquire(CID, 10_000)
    assert lease
    apply_one(store, CID, lease.token)
    assert store.accept(CID, b"x", "wamid.1").duplicate
    assert store.inbox_depth(CID) == 0


def test_concurrent_duplicate_submissions_push_once(store: ConversationStore, backend: str) -> None:
    if backend == "fakeredis":
        pytest.skip("threads against a real server only")
    results = []

    def submit() -> None:
        results.append(store.accept(CID, b"same", "wamid.dup").accepted)

    threads = [threading.Thread(target=submit) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1
    assert store.inbox_depth(CID) == 1


def test_inbox_is_bounded(store: ConversationStore) -> None:
    for i in range(50):
        accept(store, CID, i)
    with pytest.raises(InboxFullError):
        accept(store, CID, 50)
    assert store.inbox_depth(CID) == 50


def test_dedupe_memory_is_bounded(store: ConversationStore, client: redis.Redis, kit: StoreKit) -> None:
    lease = kit.acquire(CID, 10_000)
    assert lease
    for i in range(150):
        accept(store, CID, i)
        apply_one(store, CID, lease.token)
    assert client.zcard(store.keys(CID).seen) <= 100


# --- lease and fencing --------------------------------------------------------------------------------

def test_one_lease_at_a_time(store: ConversationStore, kit: StoreKit) -> None:
    a = kit.acquire(CID, 10_000)
    assert a is not None
    assert kit.acquire(CID, 10_000) is None
    assert kit.release_unless_more(CID, a.token) is False
    b = kit.acquire(CID, 10_000)
    assert b is not None and b.token > a.token


def test_stale_worker_cannot_commit_after_takeover(store: ConversationStore, kit: StoreKit) -> None:
    accept(store, CID, 1)
    a = kit.acquire(CID, 50)
    assert a
    snap = kit.head(CID)
    time.sleep(0.12)  # a's lease runs out (a GC pause, SIGSTOP, a slow model)
    b = kit.acquire(CID, 10_000)
    assert b
    with pytest.raises(StaleLeaseError):
        store.commit(CID, a.token, expected_version=snap.version, input_id="id-1", new_state=b"stale",
                     reply=b"stale reply")
    assert kit.head(CID).state is None and store.outbox_depth(CID) == 0 and store.inbox_depth(CID) == 1
    apply_one(store, CID, b.token, state=b"fresh")
    assert kit.head(CID).state == b"fresh"


def test_expired_lease_nobody_took_may_still_commit(store: ConversationStore, kit: StoreKit) -> None:
    accept(store, CID, 1)
    a = kit.acquire(CID, 30)
    assert a
    time.sleep(0.08)
    apply_one(store, CID, a.token, state=b"ok")
    assert kit.head(CID).state == b"ok"


def test_version_and_head_checks(store: ConversationStore, kit: StoreKit) -> None:
    accept(store, CID, 1)
    accept(store, CID, 2)
    a = kit.acquire(CID, 10_000)
    assert a
    with pytest.raises(StaleLeaseError):
        store.commit(CID, a.token, expected_version=7, input_id="id-1", new_state=b"x")
    with pytest.raises(StaleLeaseError):
        store.commit(CID, a.token, expected_version=0, input_id="id-2", new_state=b"x")
    assert store.inbox_depth(CID) == 2 and kit.head(CID).version == 0


def test_commit_is_all_or_nothing(store: ConversationStore, kit: StoreKit) -> None:
    accept(store, CID, 1)
    a = kit.acquire(CID, 10_000)
    assert a
    result = apply_one(store, CID, a.token, state=b"state-1", reply=b"reply-1")
    assert result.version == 1 and result.depth == 0
    snap = kit.head(CID)
    assert (snap.input, snap.state, snap.version) == (None, b"state-1", 1)
    assert store.outbox(CID) == [("id-1", b"reply-1")]
    assert store.trace(CID) == [b"t:id-1"]


def test_state_clear_and_keep(store: ConversationStore, kit: StoreKit) -> None:
    for i in range(3):
        accept(store, CID, i)
    a = kit.acquire(CID, 10_000)
    assert a
    apply_one(store, CID, a.token, state=b"s1")
    apply_one(store, CID, a.token, state=None)
    assert kit.head(CID).state == b"s1"
    apply_one(store, CID, a.token, state=b"")
    assert kit.head(CID).state is None and kit.head(CID).version == 3


def test_release_with_new_work_keeps_draining(store: ConversationStore, kit: StoreKit) -> None:
    """The lost wake-up: a producer pushes while the drainer is finishing and sees the lease taken."""
    a = kit.acquire(CID, 10_000)
    assert a
    accept(store, CID, 1)  # its wake-up task finds the lease held and exits
    assert kit.release_unless_more(CID, a.token) is True  # so the drainer must go on
    apply_one(store, CID, a.token)
    assert kit.release_unless_more(CID, a.token) is False
    assert kit.acquire(CID, 10_000) is not None


def test_forced_release(store: ConversationStore, kit: StoreKit) -> None:
    accept(store, CID, 1)
    a = kit.acquire(CID, 10_000)
    assert a
    store.release(CID, a.token)  # gives the lease up although an input waits (the caller re-wakes)
    assert not raw(store).exists(store.keys(CID).lease) and store.inbox_depth(CID) == 1
    assert kit.acquire(CID, 10_000) is not None


def test_attempts_are_counted_under_the_lease(store: ConversationStore, kit: StoreKit) -> None:
    accept(store, CID, 1)
    a = kit.acquire(CID, 10_000)
    assert a
    assert kit.note_attempt(CID, a.token, "id-1") == 1
    assert kit.note_attempt(CID, a.token, "id-1") == 2
    store.release(CID, a.token)
    b = kit.acquire(CID, 10_000)
    assert b
    with pytest.raises(StaleLeaseError):
        kit.note_attempt(CID, a.token, "id-1")
    assert kit.note_attempt(CID, b.token, "id-1") == 3
    apply_one(store, CID, b.token)
    accept(store, CID, 2)
    assert kit.note_attempt(CID, b.token, "id-2") == 1


# --- trace, dead letters, quarantine -----------------------------------------------------------------

def test_trace_is_capped(store: ConversationStore, kit: StoreKit) -> None:
    a = kit.acquire(CID, 10_000)
    assert a
    for i in range(12):
        accept(store, CID, i)
        apply_one(store, CID, a.token)
    assert store.trace(CID, 100) == [f"t:id-{i}".encode() for i in range(7, 12)]


def test_dead_letters_and_replay(store: ConversationStore, kit: StoreKit) -> None:
    accept(store, CID, 1)
    a = kit.acquire(CID, 10_000)
    assert a
    snap = kit.head(CID)
    store.commit(CID, a.token, expected_version=snap.version, input_id="id-1", new_state=None, dead=b"dead-1")
    assert store.dead_letters(CID) == [b"dead-1"]
    assert CID in store.dead_index()
    assert store.replay_dead(CID, 0, target="inbox", entry_id="id-1", payload=b"payload-1")
    assert store.dead_letters(CID) == []
    assert store.inbox(CID) == [("id-1", b"payload-1")]
    assert CID not in store.dead_index()


def test_quarantine_is_capped_and_clears_the_state(store: ConversationStore, kit: StoreKit) -> None:
    a = kit.acquire(CID, 10_000)
    assert a
    for i in range(5):
        v = kit.put_state(CID, expected_version=kit.head(CID).version, new_state=f"bad-{i}".encode())
        v = store.quarantine(CID, a.token, f"bad-{i}".encode(), "corrupt", expected_version=v)
        assert kit.head(CID).state is None and kit.head(CID).version == v
    assert len(store.quarantined(CID)) == 3


# --- delivery ------------------------------------------------------------------------------------------

def queue_reply(store: ConversationStore, cid: str, i: int) -> None:
    accept(store, cid, i)
    lease = StoreKit(store).acquire(cid, 10_000) or pytest.fail("lease")
    apply_one(store, cid, lease.token, reply=f"reply-{i}".encode())
    store.release(cid, lease.token)


def test_delivery_progress_and_crash_window(store: ConversationStore) -> None:
    queue_reply(store, CID, 1)
    t, head = store.begin_delivery(CID, 30)
    assert t and head is not None
    assert (head.record, head.reply_id, head.part, head.crashed_in_window) == (b"reply-1", "id-1", 0, False)
    store.mark_sent(CID, t, "id-1", 0, "wamid.A", lease_ms=30)
    store.mark_inflight(CID, t, "id-1", 1)
    # The worker dies here: the API may have answered 200 for part 1, but it was never marked sent.
    time.sleep(0.08)
    t2, head = store.begin_delivery(CID, 10_000)
    assert t2 and head is not None and head.part == 1 and head.crashed_in_window
    assert store.sent_last_claim_next(CID, t2, "id-1", "wamid.B", 10_000) is None
    assert store.outbox_depth(CID) == 0
    assert store.delivered(CID) == [("id-1", ["wamid.A", "wamid.B"])]
    assert not raw(store).exists(store.keys(CID).dlease)


def test_delivery_fencing_and_dead_reply(store: ConversationStore) -> None:
    queue_reply(store, CID, 1)
    queue_reply(store, CID, 2)
    t, _ = store.begin_delivery(CID, 30)
    assert t
    time.sleep(0.08)
    t2, _ = store.begin_delivery(CID, 10_000)
    assert t2 and t2 != t
    with pytest.raises(StaleLeaseError):
        store.mark_inflight(CID, t, "id-1", 0)
    with pytest.raises(StaleLeaseError):
        store.mark_sent(CID, t, "id-1", 0, "wamid.stale")
    store.dead_letter_reply(CID, t2, "id-1", b"dead reply")
    nxt = store.claim_next(CID, t2, 10_000)
    assert nxt is not None and nxt.reply_id == "id-2"  # reply 2 still waits
    assert store.dead_letters(CID) == [b"dead reply"]


def test_begin_delivery_claims_the_head_and_the_last_sent_mark_claims_the_next(store: ConversationStore) -> None:
    assert store.begin_delivery(CID, 10_000) == (None, None)  # nothing waits: no lease taken
    assert not raw(store).exists(store.keys(CID).dlease)
    queue_reply(store, CID, 1)
    queue_reply(store, CID, 2)
    t, head = store.begin_delivery(CID, 10_000)
    assert t and head is not None and (head.record, head.reply_id, head.part, head.crashed_in_window) == \
        (b"reply-1", "id-1", 0, False)
    assert store.begin_delivery(CID, 10_000) == (None, None)  # one deliverer at a time
    # The claim marked part 0 in flight: a worker dying now is seen by the next one as a crash in the window.
    assert raw(store).hget(store.keys(CID).sent, "inflight") == b"id-1:0"
    nxt = store.sent_last_claim_next(CID, t, "id-1", "wamid.A", 10_000)
    assert nxt is not None and (nxt.record, nxt.part, nxt.crashed_in_window) == (b"reply-2", 0, False)
    assert store.delivered(CID) == [("id-1", ["wamid.A"])]
    # Empty after the last reply: the lease is given up in the same script.
    assert store.sent_last_claim_next(CID, t, "id-2", "wamid.B", 10_000) is None
    assert not raw(store).exists(store.keys(CID).dlease) and store.outbox_depth(CID) == 0
    with pytest.raises(StaleLeaseError):  # a new deliverer's token fences the old one out
        queue_reply(store, CID, 3)
        t2, _ = store.begin_delivery(CID, 10_000)
        assert t2 and t2 != t
        store.claim_next(CID, t, 10_000)


def test_the_commit_that_ends_a_drain_can_start_the_delivery(store: ConversationStore) -> None:
    """One round trip fewer per reply: the releasing commit takes the delivery lease and claims the head, exactly
    as begin_delivery would; only when it releases and nobody else delivers."""
    accept(store, CID, 1)
    accept(store, CID, 2)
    b = store.begin(CID, 10_000)
    assert b.status == "ok" and b.snapshot is not None
    first = store.commit(CID, b.token, expected_version=b.snapshot.version, input_id="id-1", new_state=b"s",
                         reply=b"reply-1", claim_delivery_ms=10_000)
    assert first.next is not None and first.delivery is None  # input 2 waits: the drain goes on, no claim yet
    assert not raw(store).exists(store.keys(CID).dlease)
    last = store.commit(CID, b.token, expected_version=first.version, input_id="id-2", new_state=b"s",
                        reply=b"reply-2", claim_delivery_ms=10_000)
    assert last.released and last.delivery is not None
    t, head = last.delivery
    assert (head.record, head.reply_id, head.part, head.crashed_in_window) == (b"reply-1", "id-1", 0, False)
    assert raw(store).hget(store.keys(CID).sent, "inflight") == b"id-1:0"  # in flight before the send, as always
    assert store.begin_delivery(CID, 10_000) == (None, None)  # the lease is taken
    nxt = store.sent_last_claim_next(CID, t, "id-1", "wamid.A", 10_000)  # the token is a real delivery token
    assert nxt is not None and nxt.reply_id == "id-2"
    assert store.sent_last_claim_next(CID, t, "id-2", "wamid.B", 10_000) is None
    # Somebody else delivering: the releasing commit claims nothing.
    queue_reply(store, CID, 3)
    other, _ = store.begin_delivery(CID, 10_000)
    assert other
    accept(store, CID, 4)
    b4 = store.begin(CID, 10_000)
    assert b4.snapshot is not None
    done = store.commit(CID, b4.token, expected_version=b4.snapshot.version, input_id="id-4", new_state=b"s",
                        reply=b"reply-4", claim_delivery_ms=10_000)
    assert done.released and done.delivery is None
    # Without claim_delivery_ms nothing changes for the delivery side.
    assert store.sent_last_claim_next(CID, other, "id-3", "w3", 10_000) is not None


def test_a_crashed_deliverer_leaves_its_claim_for_the_next(store: ConversationStore) -> None:
    queue_reply(store, CID, 1)
    t, head = store.begin_delivery(CID, 30)
    assert t and head is not None and not head.crashed_in_window
    time.sleep(0.08)  # it died after the API answered, before the sent mark; its lease expired
    t2, head2 = store.begin_delivery(CID, 10_000)
    assert t2 and head2 is not None and (head2.reply_id, head2.part, head2.crashed_in_window) == ("id-1", 0, True)


def test_no_reply_is_left_without_a_deliverer(store: ConversationStore) -> None:
    """The delivery side of the lost wake-up: a reply committed while the deliverer finishes is either claimed
    by it or finds the lease free, whichever order the two land in."""
    queue_reply(store, CID, 1)
    t, _ = store.begin_delivery(CID, 10_000)
    assert t
    queue_reply(store, CID, 2)  # committed while reply 1 is being sent
    nxt = store.sent_last_claim_next(CID, t, "id-1", "w1", 10_000)
    assert nxt is not None and nxt.reply_id == "id-2"  # the deliverer takes it
    assert store.sent_last_claim_next(CID, t, "id-2", "w2", 10_000) is None
    queue_reply(store, CID, 3)  # committed after the release: a new deliverer can start
    t3, head = store.begin_delivery(CID, 10_000)
    assert t3 and head is not None and head.reply_id == "id-3"


# --- sweeper, delete, TTL, outages ----------------------------------------------------------------------

def test_stranded_finds_abandoned_work_and_forgets_empty_conversations(store: ConversationStore, kit: StoreKit) -> None:
    accept(store, "c1", 1)  # nobody drains it
    accept(store, "c2", 1)
    lease = kit.acquire("c2", 10_000)  # being drained
    assert lease
    accept(store, "c3", 1)
    l3 = kit.acquire("c3", 10_000)
    assert l3
    apply_one(store, "c3", l3.token)
    store.release("c3", l3.token)  # done: nothing left
    found = store.stranded(100, older_than_ms=0)
    assert found == ["c1"]
    assert raw(store).zscore(store.global_keys.pending, "c3") is None
    assert raw(store).zscore(store.global_keys.pending, "c2") is not None


def test_stranded_lists_a_dead_workers_conversation_while_its_player_keeps_writing(
        store: ConversationStore, kit: StoreKit) -> None:
    """An input queued behind waiting ones does not restart the sweeper's idle clock: else a dead (or stopped)
    worker's conversation stayed hidden from the sweeper for as long as its player, or the game engine's position
    events, wrote more often than the sweep age (nothing wakes it otherwise: an input behind others sends no wake-up).
    An input into an empty mailbox still stamps the mark anew (work appeared: see the next test)."""
    accept(store, "died", 1)
    lease = kit.acquire("died", 10_000)
    assert lease
    kit.note_attempt("died", lease.token, "id-1")  # what begin does at the head
    raw(store).delete(store.keys("died").lease)  # the worker died (or stalled); its lease ran out
    raw(store).zadd(store.global_keys.pending, {"died": 1})  # the mark, set when the first input came, long ago
    accept(store, "died", 2)  # the player writes again, just now
    assert raw(store).zscore(store.global_keys.pending, "died") == 1
    assert store.stranded(100, older_than_ms=60_000, backlog_ms=60_000) == ["died"]


def test_an_input_into_an_empty_mailbox_stamps_the_pending_mark_anew(store: ConversationStore, kit: StoreKit) -> None:
    """A sweeper that found the mailbox empty removes the mark only if its score is still the one it read: an input
    arriving in between must change it (and a mark that is gone must come back), so the input keeps its net."""
    raw(store).zadd(store.global_keys.pending, {"c1": 1})  # idle: the sweeper read this score and an empty mailbox
    accept(store, "c1", 1)
    assert raw(store).zscore(store.global_keys.pending, "c1") > 1
    raw(store).zrem(store.global_keys.pending, "c1")  # the sweeper removed it just before the input came
    accept(store, "c1", 2)
    assert raw(store).zscore(store.global_keys.pending, "c1") is not None


def test_tokens_from_an_earlier_life_of_a_conversation_never_match_again(store: ConversationStore, kit: StoreKit) -> None:
    """After a delete (or the idle TTL) the fence starts again from the clock, not from 1: a worker stalled since
    the conversation's earlier life cannot have its old token accepted by the new one."""
    accept(store, CID, 1)
    old = kit.acquire(CID, 10_000)
    assert old and old.token > 10**15  # microseconds since the epoch, then counted up
    store.delete(CID)
    accept(store, CID, 2)
    new = kit.acquire(CID, 10_000)
    assert new and new.token > old.token
    with pytest.raises(StaleLeaseError):
        apply_one(store, CID, old.token)
    queue_reply(store, CID + "0", 1)  # a fresh delivery fence too
    d_new, _ = store.begin_delivery(CID + "0", 10_000)
    assert d_new and d_new > 10**15


def test_delete_removes_every_key_but_the_tombstone(store: ConversationStore, client: redis.Redis,
                                                    prefix: str) -> None:
    queue_reply(store, CID, 1)
    accept(store, CID, 2)
    store.record_status(CID, "wamid.A", "read")
    store.accept("other", b"x", "o1")
    store.delete(CID)
    left = [k.decode() for k in client.scan_iter(match=f"{prefix}:*")]
    assert all("{other}" in k or k.endswith(("pending", f"{{{CID}}}:tomb")) for k in left), left
    assert raw(store).zscore(store.global_keys.pending, CID) is None
    assert 0 < client.pttl(store.keys(CID).tomb) <= store.limits.tombstone_ms  # it expires on its own


def test_delete_leaves_a_tombstone_so_retries_of_old_ids_stay_duplicates(store: ConversationStore,
                                                                         client: redis.Redis) -> None:
    """WhatsApp retries a webhook for about 36 hours: a retry after a delete must not start the conversation
    again, while a new message id does."""
    for i in range(3):
        accept(store, CID, i)
    store.delete(CID)
    assert store.inbox_depth(CID) == 0 and client.exists(store.keys(CID).seen) == 0
    assert [store.accept(CID, b"again", f"id-{i}").duplicate for i in range(3)] == [True] * 3
    assert store.inbox_depth(CID) == 0 and raw(store).zscore(store.global_keys.pending, CID) is not None
    fresh = store.accept(CID, b"new", "id-new")
    assert fresh.accepted and fresh.depth == 1
    assert [i for i, _ in store.inbox(CID)] == ["id-new"]
    assert store.accept("other", b"x", "id-0").accepted  # the tombstone is the conversation's own


def test_tombstoned_ids_outlive_the_dedupe_window(client: redis.Redis, prefix: str) -> None:
    """The dedupe memory trims ids older than its window on every accept; the tombstone keeps its own time."""
    before = ConversationStore(client, prefix=prefix, limits=StoreLimits(tombstone_ms=60_000))
    for i in range(2):
        before.accept(CID, b"x", f"old-{i}")
    before.delete(CID)
    time.sleep(0.01)
    # The same keys under a tiny dedupe memory (1 ms, 2 ids): new ids push its count and age past the limits.
    s = ConversationStore(client, prefix=prefix, limits=StoreLimits(dedupe_ms=1, dedupe_max_ids=2))
    for i in range(5):
        assert s.accept(CID, b"y", f"new-{i}").accepted
    assert s.accept(CID, b"x", "old-0").duplicate and s.accept(CID, b"x", "old-1").duplicate
    assert 50_000 < client.pttl(s.keys(CID).tomb) <= 60_000


def test_a_second_delete_keeps_both_lives_in_the_tombstone(client: redis.Redis, prefix: str) -> None:
    s = ConversationStore(client, prefix=prefix, limits=StoreLimits(tombstone_ms=60_000))
    s.accept(CID, b"x", "first")
    s.delete(CID)
    s.accept(CID, b"y", "second")
    s.delete(CID)
    assert s.accept(CID, b"x", "first").duplicate and s.accept(CID, b"y", "second").duplicate
    assert client.zcard(s.keys(CID).tomb) == 2


def test_no_tombstone_when_it_is_turned_off(client: redis.Redis, prefix: str) -> None:
    s = ConversationStore(client, prefix=prefix, limits=StoreLimits(tombstone_ms=0))
    s.accept(CID, b"x", "1")
    s.delete(CID)
    assert client.exists(s.keys(CID).tomb) == 0
    assert s.accept(CID, b"x", "1").accepted  # the old behaviour: a retry starts it again


def test_delete_of_an_unknown_conversation_leaves_nothing(store: ConversationStore, client: redis.Redis,
                                                          prefix: str) -> None:
    store.delete("never-seen")
    assert list(client.scan_iter(match=f"{prefix}:*never-seen*")) == []


def test_idle_ttl(client: redis.Redis, prefix: str) -> None:
    s = ConversationStore(client, prefix=prefix, limits=StoreLimits(idle_ttl_ms=60_000))
    s.accept(CID, b"x", "1")
    assert 0 < client.pttl(s.keys(CID).inbox) <= 60_000
    assert client.pttl(s.global_keys.pending) == -1  # the sweeper's index spans conversations: it never expires
    s.accept(CID, b"y", "2")  # still waiting after the commit, so the lease stays (with its own expiry)
    lease = StoreKit(s).acquire(CID, 10_000)
    assert lease
    s.commit(CID, lease.token, expected_version=0, input_id="1", new_state=b"s", reply=b"r", lease_ms=10_000)
    k = s.keys(CID)
    assert 0 < client.pttl(k.state) <= 60_000
    assert 0 < client.pttl(k.blob) <= 60_000  # the state's parts expire with its hash (an accept refreshes both)
    assert 0 < client.pttl(k.outbox) <= 60_000
    assert 0 < client.pttl(k.lease) <= 10_000  # the lease keeps its own expiry
    s.delete(CID)


def test_redis_down_is_a_typed_retryable_error() -> None:
    from tests.support.redis_server import free_port

    dead = ConversationStore(redis.Redis(port=free_port(), socket_connect_timeout=0.2), prefix="x")
    with pytest.raises(StoreUnavailableError) as info:
        dead.accept(CID, b"x", "1")
    assert info.value.retryable


# --- heartbeat, delivery failures, lease-free state read ------------------------------------------------

def test_renew_lease_keeps_a_running_turn(store: ConversationStore) -> None:
    accept(store, CID, 1)
    a = store.begin(CID, 50)
    assert a.status == "ok"
    assert store.renew_lease(CID, a.token, 10_000)
    assert 50 < raw(store).pttl(store.keys(CID).lease) <= 10_000
    assert store.begin(CID, 10_000).status == "busy"  # the heartbeat keeps others out


def test_renew_lease_after_expiry_is_safe_while_nobody_took_a_newer_token(store: ConversationStore) -> None:
    accept(store, CID, 1)
    a = store.begin(CID, 30)
    time.sleep(0.08)  # a long model call outlived the lease, but nobody took the conversation
    assert store.renew_lease(CID, a.token, 10_000)
    assert raw(store).get(store.keys(CID).lease) == str(a.token).encode()
    assert store.begin(CID, 10_000).status == "busy"


def test_renew_lease_changes_nothing_for_a_fenced_out_worker(store: ConversationStore) -> None:
    accept(store, CID, 1)
    a = store.begin(CID, 30)
    time.sleep(0.08)
    b = store.begin(CID, 10_000)  # the worker was presumed dead: another took over
    assert b.status == "ok" and b.token > a.token
    before = raw(store).pttl(store.keys(CID).lease)
    assert store.renew_lease(CID, a.token, 60_000) is False
    assert raw(store).get(store.keys(CID).lease) == str(b.token).encode()
    assert raw(store).pttl(store.keys(CID).lease) <= before
    assert b.snapshot is not None
    store.commit(CID, b.token, expected_version=b.snapshot.version, input_id="id-1", new_state=b"b")


def test_delivery_failures_are_counted_per_reply_across_deliverers(store: ConversationStore) -> None:
    queue_reply(store, CID, 1)
    queue_reply(store, CID, 2)
    t, head = store.begin_delivery(CID, 30)
    assert t and head is not None and head.reply_id == "id-1"
    assert store.note_delivery_failure(CID, t, "id-1") == 1
    store.clear_inflight(CID, t)
    store.release_delivery(CID, t)  # the task retries later, or the sweeper, or the next turn's inline delivery
    t2, head = store.begin_delivery(CID, 10_000)
    assert t2 and t2 != t and head is not None and head.reply_id == "id-1"
    assert store.note_delivery_failure(CID, t2, "id-1") == 2  # the count survived the new deliverer
    with pytest.raises(StaleLeaseError):
        store.note_delivery_failure(CID, t, "id-1")  # the old token is fenced out
    nxt = store.sent_last_claim_next(CID, t2, "id-1", "wamid.A", 10_000)
    assert nxt is not None and nxt.reply_id == "id-2"
    assert store.note_delivery_failure(CID, t2, "id-2") == 1  # a new reply starts again
    store.dead_letter_reply(CID, t2, "id-2", b"dead reply")
    assert not raw(store).hexists(store.keys(CID).sent, "failures")  # gone with the reply


def test_delivery_failures_of_a_reply_that_left_the_head_are_refused(store: ConversationStore) -> None:
    queue_reply(store, CID, 1)
    queue_reply(store, CID, 2)
    t, _ = store.begin_delivery(CID, 10_000)
    assert t
    assert store.sent_last_claim_next(CID, t, "id-1", "wamid.A", 10_000) is not None
    with pytest.raises(StaleLeaseError):
        store.note_delivery_failure(CID, t, "id-1")
    assert store.note_delivery_failure(CID, t, "id-2") == 1


def test_a_new_head_reply_starts_with_no_failures_even_if_progress_was_left(store: ConversationStore) -> None:
    """Progress left by another reply (a replayed dead letter, a deleted head) must not be charged to the head."""
    queue_reply(store, CID, 1)
    raw(store).hset(store.keys(CID).sent, mapping={"reply_id": "gone", "part": 3, "failures": 7})
    t, head = store.begin_delivery(CID, 10_000)
    assert t and head is not None and head.part == 0 and not head.crashed_in_window
    assert store.note_delivery_failure(CID, t, "id-1") == 1


def test_read_state_needs_no_lease(store: ConversationStore) -> None:
    assert (store.read_state(CID).blob, store.read_state(CID).version) == (None, 0)
    accept(store, CID, 1)
    b = store.begin(CID, 10_000)
    assert b.snapshot is not None
    store.commit(CID, b.token, expected_version=0, input_id="id-1", new_state=b"state-1")
    assert (store.read_state(CID).blob, store.read_state(CID).version) == (b"state-1", 1)
    assert not raw(store).exists(store.keys(CID).lease)  # read while nobody holds the conversation


def test_commit_hands_back_the_next_input_with_the_state_in_every_mode(store: ConversationStore) -> None:
    for i in range(4):
        accept(store, CID, i)
    b = store.begin(CID, 10_000)
    assert b.snapshot is not None and b.attempts == 1
    r1 = store.commit(CID, b.token, expected_version=0, input_id="id-0", new_state=b"set")
    assert r1.next is not None and (r1.next.input_id, r1.next.state, r1.next_attempts) == ("id-1", b"set", 1)
    r2 = store.commit(CID, b.token, expected_version=r1.version, input_id="id-1", new_state=None)
    assert r2.next is not None and r2.next.state == b"set"  # kept: read back in the same script
    r3 = store.commit(CID, b.token, expected_version=r2.version, input_id="id-2", new_state=b"")
    assert r3.next is not None and r3.next.state is None and r3.depth == 1
    r4 = store.commit(CID, b.token, expected_version=r3.version, input_id="id-3", new_state=b"x")
    assert r4.released and r4.next is None and r4.delivery is None
    assert not raw(store).exists(store.keys(CID).lease)


def test_stranded_drops_members_that_are_not_conversation_ids(store: ConversationStore) -> None:
    raw(store).zadd(store.global_keys.pending, {"not a valid id*": 1})
    accept(store, "c1", 1)
    assert store.stranded(100, older_than_ms=0) == ["c1"]
    assert raw(store).zscore(store.global_keys.pending, "not a valid id*") is None


def test_stranded_lists_a_dead_workers_conversation_soon_and_a_queued_one_only_after_the_backlog_age(
        store: ConversationStore, kit: StoreKit) -> None:
    """A queued conversation (no attempt counted, nothing in flight) looks stranded too; waking it again while the
    workers are behind a backlog would double the queue, so only evidence of a dead worker gets the short age."""
    accept(store, "queued", 1)  # its wake-up waits in the broker's queue
    accept(store, "died", 1)
    lease = kit.acquire("died", 10_000)
    assert lease
    kit.note_attempt("died", lease.token, "died-1")  # what begin does at the head
    raw(store).delete(store.keys("died").lease)  # the worker died; its lease ran out
    queue_reply(store, "sending", 1)
    token, head = store.begin_delivery("sending", 10_000)  # the claim marks the part in flight
    assert token and head
    raw(store).delete(store.keys("sending").dlease)  # the deliverer died mid-send
    raw(store).zadd(store.global_keys.pending, {"sending": 1})
    queued_at = raw(store).zscore(store.global_keys.pending, "queued")
    assert sorted(store.stranded(100, older_than_ms=0, backlog_ms=60_000)) == ["died", "sending"]
    assert raw(store).zscore(store.global_keys.pending, "queued") == queued_at  # not listed, not touched
    assert raw(store).zscore(store.global_keys.pending, "sending") > 1  # listed: re-stamped, woken once per age
    assert sorted(store.stranded(100, older_than_ms=0, backlog_ms=0)) == ["died", "queued", "sending"]
