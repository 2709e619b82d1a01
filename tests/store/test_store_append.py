"""A turn writes what it adds (issue 33), on every backend: a commit may append the bytes a turn added to the stored
blob instead of writing it whole (or replace its loose frames with a compressed run, format 5), refused when the stored blob is not the one the writer encoded from; a state kept
where it was before (the state hash's ``blob`` field) still loads and its next whole write moves it; every way a state
goes (clear, quarantine, delete) takes the blob key with it, and the idle TTL covers it."""

from __future__ import annotations

import pytest
import redis

from tests.support.store_kit import StoreKit
from worker.errors import StaleLeaseError
from worker.store.redis_store import ConversationStore, StoreLimits

CID = "447700900333"


def _stored(client: redis.Redis, store: ConversationStore) -> bytes:
    """The blob as its list holds it (a base, then the frames), joined."""
    return b"".join(client.lrange(store.keys(CID).blob, 0, -1))


def _turn(store: ConversationStore, n: int, state: bytes | None, *, appended_to: int | None = None,
          reply: bytes | None = None, folded_from: int | None = None) -> str:
    store.accept(CID, f"p{n}".encode(), f"id-{n}")
    begin = store.begin(CID, 10_000)
    assert begin.snapshot is not None
    return store.commit(CID, begin.token, expected_version=begin.snapshot.version, input_id=f"id-{n}",
                        new_state=state, appended_to=appended_to, reply=reply, folded_from=folded_from).tag


def test_a_commit_appends_what_the_turn_added(store: ConversationStore, client: redis.Redis) -> None:
    first = _turn(store, 0, b"base")
    second = _turn(store, 1, b"base+one", appended_to=4)
    third = _turn(store, 2, b"base+one+two", appended_to=8)
    assert _stored(client, store) == b"base+one+two" == store.read_state(CID).blob
    assert client.lrange(store.keys(CID).blob, 0, -1) == [b"base", b"+one", b"+two"]  # the base, then each turn's
    assert len({first, second, third}) == 3  # every write, appended or whole, names a new blob
    begin = store.begin(CID, 10_000, have=second)  # a worker holding an older state is sent the whole blob
    assert begin.snapshot is None or begin.snapshot.state is None  # nothing waits: nothing is read
    store.accept(CID, b"p3", "id-3")
    begin = store.begin(CID, 10_000, have=second)
    assert begin.snapshot is not None and begin.snapshot.state == b"base+one+two" and begin.snapshot.tag == third


def test_a_fold_replaces_the_stored_bytes_after_its_cut_and_keeps_those_before(store: ConversationStore,
                                                                              client: redis.Redis) -> None:
    """A fold (format 5: the loose frames compressed into one run) sends the new bytes from where the loose frames
    start; the store drops what it held after that point, whole entries, and the head of an entry that straddles it,
    whatever entries the list was written in."""
    _turn(store, 0, b"base")
    _turn(store, 1, b"base+one", appended_to=4)
    _turn(store, 2, b"base+one+two", appended_to=8)
    _turn(store, 3, b"base+RUN", appended_to=12, folded_from=4)  # +one+two folded
    assert client.lrange(store.keys(CID).blob, 0, -1) == [b"base", b"+RUN"] and store.read_state(CID).blob == b"base+RUN"
    _turn(store, 4, b"base+RUN+three", appended_to=8)
    _turn(store, 5, b"base+RUX", appended_to=14, folded_from=7)  # the cut falls inside an entry
    assert _stored(client, store) == b"base+RUX" == store.read_state(CID).blob
    _turn(store, 6, b"base+RUX!", appended_to=8)  # the stored length followed the fold: appends go on
    assert store.read_state(CID).blob == b"base+RUX!"


def test_a_fold_onto_another_blob_is_refused_and_changes_nothing(store: ConversationStore,
                                                                client: redis.Redis) -> None:
    _turn(store, 0, b"base")
    _turn(store, 1, b"base+one", appended_to=4)
    store.accept(CID, b"p2", "id-2")
    begin = store.begin(CID, 10_000)
    assert begin.snapshot is not None
    for at, cut in ((12, 4), (8, 9)):  # made on a longer blob; a cut past the stored blob's end
        with pytest.raises(StaleLeaseError):
            store.commit(CID, begin.token, expected_version=begin.snapshot.version, input_id="id-2",
                         new_state=b"base+RUN+two", appended_to=at, folded_from=cut)
    assert _stored(client, store) == b"base+one" and store.inbox_depth(CID) == 1


def test_an_append_onto_another_blob_is_refused_and_changes_nothing(store: ConversationStore,
                                                                   client: redis.Redis) -> None:
    tag = _turn(store, 0, b"base")
    store.accept(CID, b"p1", "id-1")
    begin = store.begin(CID, 10_000)
    assert begin.snapshot is not None
    with pytest.raises(StaleLeaseError):  # encoded from a 3-byte blob: not the stored one
        store.commit(CID, begin.token, expected_version=begin.snapshot.version, input_id="id-1",
                     new_state=b"bas+one", appended_to=3, reply=b"r")
    assert _stored(client, store) == b"base" and store.inbox_depth(CID) == 1
    assert store.outbox_depth(CID) == 0 and store.read_state(CID).version == begin.snapshot.version
    assert StoreKit(store).head(CID).state == b"base" and tag


def test_a_state_where_it_was_before_loads_and_its_next_whole_write_moves_it(store: ConversationStore,
                                                                            client: redis.Redis) -> None:
    k = store.keys(CID)
    client.hset(k.state, mapping={"blob": b"old", "version": 3, "tag": "old:3"})
    assert store.read_state(CID).blob == b"old"
    store.accept(CID, b"p0", "id-0")
    store.accept(CID, b"p1", "id-1")
    begin = store.begin(CID, 10_000)
    assert begin.snapshot is not None and begin.snapshot.state == b"old" and begin.snapshot.version == 3
    with pytest.raises(StaleLeaseError):  # nothing is stored under the blob key: an append cannot go there
        store.commit(CID, begin.token, expected_version=3, input_id="id-0", new_state=b"old+x", appended_to=3)
    kept = store.commit(CID, begin.token, expected_version=3, input_id="id-0", new_state=None)
    assert kept.next is not None and kept.next.state == b"old"  # a commit that keeps the state hands it back
    store.commit(CID, begin.token, expected_version=4, input_id="id-1", new_state=b"new whole")
    assert _stored(client, store) == b"new whole" and not client.hexists(k.state, "blob")
    assert store.read_state(CID).blob == b"new whole"


def test_clear_quarantine_and_delete_take_the_blob_key(store: ConversationStore, client: redis.Redis) -> None:
    k = store.keys(CID)
    _turn(store, 0, b"s0")
    _turn(store, 1, b"")  # a reset that clears the state
    assert not client.exists(k.blob) and store.read_state(CID).blob is None
    _turn(store, 2, b"s2")
    store.accept(CID, b"p3", "id-3")
    begin = store.begin(CID, 10_000)
    assert begin.snapshot is not None
    version = store.quarantine(CID, begin.token, b"s2", "corrupt", expected_version=begin.snapshot.version)
    assert not client.exists(k.blob) and store.read_state(CID).blob is None
    store.commit(CID, begin.token, expected_version=version, input_id="id-3", new_state=b"s3")
    assert client.exists(k.blob)
    store.delete(CID)
    assert not client.exists(k.blob) and not client.exists(k.state)


def test_the_idle_ttl_covers_the_blob_key(client: redis.Redis, prefix: str) -> None:
    s = ConversationStore(client, prefix=prefix, limits=StoreLimits(idle_ttl_ms=60_000))
    for n, (state, at) in enumerate(((b"base", None), (b"base+one", 4))):
        s.accept(CID, b"x", f"id-{n}")
        begin = s.begin(CID, 10_000)
        assert begin.snapshot is not None
        s.commit(CID, begin.token, expected_version=begin.snapshot.version, input_id=f"id-{n}", new_state=state,
                 appended_to=at)
        assert 0 < client.pttl(s.keys(CID).blob) <= 60_000
    s.delete(CID)


def test_every_key_of_a_conversation_shares_its_hash_tag(store: ConversationStore) -> None:
    assert all(key.startswith(f"{store.keys(CID).prefix}:{{{CID}}}:") for key in store.keys(CID).all())
    assert store.keys(CID).blob in store.keys(CID).all()
