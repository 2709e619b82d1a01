"""The store's side of keeping states decoded between turns, on every backend: the state's tag changes with every
write of the blob and never comes back, and the begin script withholds the blob only when the caller holds that
very state; begin and commit say whether the turn journal has anything to read."""

from __future__ import annotations

from tests.support.store_kit import StoreKit
from worker.store.redis_store import ConversationStore

CID = "447700900888"


def _turn(store: ConversationStore, n: int, state: bytes | None, *, have: str = "") -> tuple[str, bytes | None]:
    """Accept input ``n``, begin with ``have``, commit ``state``: returns the tag after the commit and the blob the
    begin sent."""
    store.accept(CID, f"p{n}".encode(), f"id-{n}")
    begin = store.begin(CID, 10_000, have=have)
    assert begin.snapshot is not None
    done = store.commit(CID, begin.token, expected_version=begin.snapshot.version, input_id=f"id-{n}",
                        new_state=state)
    return done.tag, begin.snapshot.state


def test_every_write_of_the_blob_gets_a_new_tag(store: ConversationStore) -> None:
    tags = [_turn(store, i, f"s{i}".encode())[0] for i in range(4)]
    assert all(tags) and len(set(tags)) == 4


def test_two_writes_under_one_lease_get_different_tags(store: ConversationStore) -> None:
    """One drain commits several inputs under one token: if only the token named a state, a worker whose commit
    landed but whose reply was lost would keep the older state under the newer state's tag."""
    store.accept(CID, b"p0", "id-0")
    store.accept(CID, b"p1", "id-1")
    begin = store.begin(CID, 10_000)
    assert begin.snapshot is not None
    first = store.commit(CID, begin.token, expected_version=0, input_id="id-0", new_state=b"s0")
    second = store.commit(CID, begin.token, expected_version=first.version, input_id="id-1", new_state=b"s1")
    assert first.tag and second.tag and first.tag != second.tag


def test_a_commit_that_keeps_the_state_keeps_its_tag(store: ConversationStore) -> None:
    tag, _ = _turn(store, 0, b"s0")
    kept, _ = _turn(store, 1, None)  # a notice or a dead letter: the state is not written
    assert kept == tag


def test_begin_withholds_only_the_blob_the_caller_holds(store: ConversationStore) -> None:
    tag, _ = _turn(store, 0, b"s0")
    store.accept(CID, b"p1", "id-1")
    begin = store.begin(CID, 10_000, have=tag)
    assert begin.snapshot is not None and begin.snapshot.state is None and begin.snapshot.tag == tag
    store.release(CID, begin.token)
    begin = store.begin(CID, 10_000, have="another:tag")
    assert begin.snapshot is not None and begin.snapshot.state == b"s0" and begin.snapshot.tag == tag
    store.release(CID, begin.token)
    begin = store.begin(CID, 10_000)
    assert begin.snapshot is not None and begin.snapshot.state == b"s0"


def test_a_worker_holding_an_old_state_is_sent_the_new_one(store: ConversationStore) -> None:
    """Worker A wrote s0 and kept it; worker B then wrote s1: A's next begin must get s1, not keep s0."""
    a_tag, _ = _turn(store, 0, b"s0")
    _turn(store, 1, b"s1")  # worker B, holding nothing
    _, sent = _turn(store, 2, b"s2", have=a_tag)
    assert sent == b"s1"


def test_clearing_or_quarantining_the_state_drops_its_tag(store: ConversationStore) -> None:
    tag, _ = _turn(store, 0, b"s0")
    cleared, _ = _turn(store, 1, b"")  # a reset
    assert cleared == "" and store.read_state(CID).blob is None
    tag, _ = _turn(store, 2, b"s2")
    store.accept(CID, b"p3", "id-3")
    begin = store.begin(CID, 10_000, have=tag)
    assert begin.snapshot is not None
    store.quarantine(CID, begin.token, b"s2", "test", expected_version=begin.snapshot.version)
    store.release(CID, begin.token)
    begin = store.begin(CID, 10_000, have=tag)
    assert begin.snapshot is not None and begin.snapshot.state is None and begin.snapshot.tag == ""


def test_a_tag_from_before_a_delete_never_matches_after_it(store: ConversationStore) -> None:
    """Versions start again after a delete; tags must not, or a worker would take its old state for the new."""
    old, _ = _turn(store, 0, b"old life")
    store.delete(CID)
    new, _ = _turn(store, 1, b"new life")
    assert new != old
    _, sent = _turn(store, 2, b"later", have=old)
    assert sent == b"new life"


def test_put_state_of_the_test_kit_gives_a_new_tag_too(store: ConversationStore) -> None:
    tag, _ = _turn(store, 0, b"s0")
    StoreKit(store).put_state(CID, expected_version=store.read_state(CID).version, new_state=b"by hand")
    _, sent = _turn(store, 1, b"s1", have=tag)
    assert sent == b"by hand"


def test_begin_says_whether_the_journal_has_entries(store: ConversationStore) -> None:
    store.accept(CID, b"p0", "id-0")
    store.accept(CID, b"p1", "id-1")
    begin = store.begin(CID, 10_000)
    assert begin.snapshot is not None and not begin.snapshot.journal
    assert store.record_step(CID, begin.token, "id-0", step=0, entry=b"round")
    store.release(CID, begin.token)
    begin = store.begin(CID, 10_000)
    assert begin.snapshot is not None and begin.snapshot.journal  # a crashed run left a round to replay
    done = store.commit(CID, begin.token, expected_version=0, input_id="id-0", new_state=b"s")
    assert done.next is not None and not done.next.journal  # the commit deleted it
