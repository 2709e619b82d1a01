"""The durable record's stream, on every backend: the scripts append what they did only while the record is on,
in the slot of the conversation (so it works on a Cluster), capped with a count of what the cap dropped, and the
exporter's acknowledgement deletes exactly the entries it names."""

from __future__ import annotations

import pytest
import redis

from tests.support.store_kit import StoreKit, raw
from worker.durable_record import entries
from worker.store.keys import RecordKeys, key_slot
from worker.store.redis_store import ConversationStore, StoreLimits

CID = "447700900321"


def _store(client: redis.Redis, prefix: str, record_max: int) -> ConversationStore:
    return ConversationStore(client, prefix=prefix, limits=StoreLimits(record_max=record_max, trace_max=5))


def _commit(store: ConversationStore, cid: str, i: int, *, reply: bytes | None = None) -> None:
    store.accept(cid, f"payload-{i}".encode(), f"id-{i}")
    lease = StoreKit(store).acquire(cid, 10_000) or pytest.fail("lease")
    snap = StoreKit(store).head(cid)
    record = entries.applied("event", cid, inputs=[entries.InputRecord(f"id-{i}", "event", f"text {i}")])
    store.commit(cid, lease.token, expected_version=snap.version, input_id=f"id-{i}", new_state=b"s", reply=reply,
                 trace=b"t", record=record)
    store.release(cid, lease.token)


def _status(cid: str, provider_id: str, status: str) -> bytes:
    """The record entry the ingress hands the store with a status webhook (no part named)."""
    return entries.status(cid, provider_id=provider_id, status=status, detail="", reply_id=None, part=0)


def _all(store: ConversationStore) -> list[dict]:  # type: ignore[type-arg]
    out = []
    for stream in store.record_streams():
        for e in store.read_records(stream, 1000):
            out.append({"id": e.record_id, "extra": e.extra, **entries.decode(e.raw)})
    return out


def test_nothing_is_recorded_while_the_record_is_off(client: redis.Redis, prefix: str) -> None:
    store = _store(client, prefix, 0)
    _commit(store, CID, 1)
    store.record_status(CID, "wamid.A", "sent", record=_status(CID, "wamid.A", "sent"))
    store.delete(CID, record=entries.deleted(CID))
    assert _all(store) == []
    assert store.record_backlog().entries == 0


def test_a_commit_appends_its_record_with_a_unique_id(client: redis.Redis, prefix: str) -> None:
    store = _store(client, prefix, 100)
    _commit(store, CID, 1)
    _commit(store, CID, 2)
    got = _all(store)
    assert [(g["kind"], g["inputs"][0]["text"]) for g in got] == [("event", "text 1"), ("event", "text 2")]
    ids = [g["id"] for g in got]
    assert len(set(ids)) == 2 and all(i.endswith((":1", ":2")) for i in ids)  # <token>:<version>


def test_refused_commit_appends_nothing(client: redis.Redis, prefix: str) -> None:
    store = _store(client, prefix, 100)
    store.accept(CID, b"p", "id-1")
    lease = StoreKit(store).acquire(CID, 10_000) or pytest.fail("lease")
    from worker.errors import StaleLeaseError

    with pytest.raises(StaleLeaseError):
        store.commit(CID, lease.token + 1, expected_version=0, input_id="id-1", new_state=b"s",
                     record=entries.deleted(CID))
    assert _all(store) == []


def test_statuses_sent_replies_failed_replies_and_deletes_are_recorded(client: redis.Redis, prefix: str) -> None:
    store = _store(client, prefix, 100)
    _commit(store, CID, 1, reply=b"reply-1")
    t, head = store.begin_delivery(CID, 10_000)
    assert t and head is not None
    store.mark_sent(CID, t, "id-1", 0, "wamid.A", lease_ms=10_000)
    store.sent_last_claim_next(CID, t, "id-1", "wamid.B", 10_000, entries.sent(CID, "id-1"))
    assert store.record_status(CID, "wamid.A", "delivered", record=_status(CID, "wamid.A", "delivered")).moved
    # not forward: not recorded again
    assert not store.record_status(CID, "wamid.A", "sent", record=_status(CID, "wamid.A", "sent")).moved
    _commit(store, CID, 2, reply=b"reply-2")
    t, head = store.begin_delivery(CID, 10_000)
    assert t and head is not None
    store.dead_letter_reply(CID, t, "id-2", b"dead", entries.failed(CID, "id-2", "outside_window:131047"))
    store.delete(CID, record=entries.deleted(CID))
    got = _all(store)
    assert [g["kind"] for g in got] == ["event", "sent", "status", "event", "failed", "delete"]
    sent, status, failed = got[1], got[2], got[4]
    assert (sent["reply_id"], sent["extra"]) == ("id-1", "wamid.A,wamid.B")
    assert (status["provider_id"], status["status"], status["id"]) == ("wamid.A", "delivered", "s:wamid.A:delivered")
    assert (failed["reply_id"], failed["reason"]) == ("id-2", "outside_window:131047")
    assert got[-1]["cid"] == CID
    # The stream is not a key of the conversation: the delete recorded itself and kept it.
    assert store.record_backlog().entries == 6


def test_the_stream_is_capped_and_counts_what_it_dropped(client: redis.Redis, prefix: str) -> None:
    store = _store(client, prefix, 3)
    for i in range(5):
        _commit(store, CID, i)
    got = _all(store)
    assert [g["inputs"][0]["text"] for g in got] == ["text 2", "text 3", "text 4"]  # the newest kept
    backlog = store.record_backlog()
    assert (backlog.entries, backlog.dropped) == (3, 2)
    assert backlog.oldest_age_s < 60


def test_ack_deletes_exactly_the_named_entries(client: redis.Redis, prefix: str) -> None:
    store = _store(client, prefix, 100)
    for i in range(4):
        _commit(store, CID, i)
    [stream] = store.record_streams()
    batch = store.read_records(stream, 2)
    _commit(store, CID, 9)  # appended while the batch is being written
    assert store.ack_records(stream, [e.entry_id for e in batch]) == 2
    assert store.ack_records(stream, [e.entry_id for e in batch]) == 0  # a replayed ack changes nothing
    assert [g["inputs"][0]["text"] for g in _all(store)] == ["text 2", "text 3", "text 9"]


def test_on_a_cluster_each_stream_shares_its_conversations_slot() -> None:
    keys = RecordKeys("p", clustered=True)
    for cid in ["447700900001", "US.13491208655302741918", "game-42", "x"]:
        stream = keys.stream(cid)
        tag = stream[stream.index("{") + 1: stream.index("}")]
        assert key_slot(tag) == key_slot(cid)
        assert keys.dropped(cid) == stream.removesuffix(":records") + ":dropped"
    assert len(set(keys.streams())) == 16384
    assert RecordKeys("p").streams() == ["p:{rec.0}:records"]


def test_records_of_many_conversations_on_this_backend(client: redis.Redis, prefix: str) -> None:
    store = _store(client, prefix, 100)
    cids = [f"4477009{i:05d}" for i in range(12)]
    for cid in cids:
        _commit(store, cid, 1)
    got = _all(store)
    assert sorted(g["cid"] for g in got) == sorted(cids)
    assert raw(store) is not None
