"""The store's shape: the protocols the service depends on, and the Lua scripts' one-shape results."""

from __future__ import annotations

import inspect

import fakeredis
import pytest

from tests.support.store_kit import StoreKit, raw
from worker.store import lua
from worker.store.interfaces import DeliveryStore, DrainStore, PaceStore, SweeperStore, WorkerStore
from worker.store.redis_store import ConversationStore
from worker.store.scripts import Scripts

CID = "447700900123"


@pytest.fixture
def store() -> ConversationStore:
    return ConversationStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix="shape")


@pytest.mark.parametrize("protocol", [WorkerStore, DrainStore, DeliveryStore, PaceStore, SweeperStore])
def test_the_redis_store_satisfies_the_protocols(store: ConversationStore, protocol: type) -> None:
    assert isinstance(store, protocol)
    for name, member in vars(protocol).items():
        if callable(member) and not name.startswith("_"):
            assert inspect.signature(getattr(ConversationStore, name)) == inspect.signature(member), name


def test_the_raw_client_is_private(store: ConversationStore) -> None:
    assert not hasattr(store, "r")


def test_every_script_wrapper_takes_named_arguments_only() -> None:
    for name, fn in inspect.getmembers(Scripts, inspect.isfunction):
        if name.startswith("_"):
            continue
        params = list(inspect.signature(fn).parameters.values())[1:]
        assert params and all(p.kind is p.KEYWORD_ONLY for p in params), name


def test_commit_answers_in_one_shape_on_every_path(store: ConversationStore) -> None:
    """Refused, handed the next input, released, released with a delivery started: thirteen fields each time."""
    commit = raw(store).register_script(lua.COMMIT)
    k = store.keys(CID)
    stream = store.records.stream(CID)
    keys = [k.fence, k.state, k.inbox, k.attempts, k.outbox, k.trace, k.dead, k.lease, k.dlease, k.dfence, k.sent,
            k.journal, stream, store.records.dropped_of(stream), k.usage, k.inbound, k.blob, k.recall, k.recall_index]

    def run(token: int, version: int, input_id: str, claim: str = "") -> list[object]:
        return list(commit(keys=keys, args=[token, version, input_id, "set", b"s", f"{input_id}\nr".encode(), b"",
                                           b"", 10_000, 10, 10, 0, claim, 0, b"r", 10, "2026-11-25", 7, 0, 0,
                                           b"", b"", 0, ""]))

    for i in range(2):
        store.accept(CID, b"x", f"id-{i}")
    lease = StoreKit(store).acquire(CID, 10_000)
    assert lease
    shapes = [run(lease.token + 1, 0, "id-0"), run(lease.token, 0, "id-0"), run(lease.token, 1, "id-1", "10000")]
    assert shapes[0][0] == -1 and shapes[1][2] == 0 and shapes[2][2] == 1 and shapes[2][6]
    store.accept(CID, b"x", "id-2")
    shapes.append(run(lease.token, 2, "id-2"))  # released, nothing claimed (a deliverer holds the lease)
    assert all(len(s) == 13 for s in shapes), shapes


def test_record_step_answers_in_one_shape(store: ConversationStore) -> None:
    """Fenced out, not the head, recorded, full: two fields each time."""
    record = raw(store).register_script(lua.RECORD_STEP)
    k = store.keys(CID)
    store.accept(CID, b"x", "id-0")
    token = store.begin(CID, 10_000).token

    def run(tok: int, input_id: str, field: str) -> list[object]:
        return list(record(keys=[k.fence, k.inbox, k.journal], args=[tok, input_id, field, b"e", 1, 0]))

    shapes = [run(token + 1, "id-0", "a"), run(token, "id-9", "a"), run(token, "id-0", "a"), run(token, "id-0", "b")]
    assert [s[0] for s in shapes] == [-1, -3, 1, -4]
    assert all(len(s) == 2 for s in shapes), shapes


def test_claims_answer_in_one_shape(store: ConversationStore) -> None:
    """Nothing to send, fenced out, claimed (with the player's last message time), busy: five fields each time."""
    k = store.keys(CID)
    begin = raw(store).register_script(lua.BEGIN_DELIVERY)
    claim_next = raw(store).register_script(lua.CLAIM_NEXT)
    begin_keys = [k.dlease, k.dfence, k.outbox, k.sent, k.inbound]
    assert len(begin(keys=begin_keys, args=[10_000])) == 5  # nothing to send
    assert len(claim_next(keys=[k.dfence, k.outbox, k.sent, k.dlease, k.inbound], args=[1, 10_000])) == 5  # fenced
    raw(store).rpush(k.outbox, b"r1\nreply")
    raw(store).set(k.inbound, 1_764_000_000_000)
    claimed = begin(keys=begin_keys, args=[10_000])
    assert len(claimed) == 5 and claimed[4] == b"1764000000000"  # claimed
    assert len(begin(keys=begin_keys, args=[10_000])) == 5  # busy


def test_statuses_answer_in_one_shape(store: ConversationStore) -> None:
    """A new message, a step back, a step forward, with and without the part in flight: three fields each time."""
    record = raw(store).register_script(lua.RECORD_STATUS)
    k = store.keys(CID)
    raw(store).rpush(k.outbox, b"r1\nreply")
    store.begin_delivery(CID, 10_000)  # part 0 of r1 in flight

    def run(status: str, reply_id: str = "") -> list[object]:
        return list(record(keys=[k.statuses, k.statusorder, k.sent], args=["wamid.A", status, "", 10, reply_id, 0]))

    shapes = [run("delivered"), run("sent", "r1"), run("read", "r9"), run("read", "r1")]
    assert [(s[0], s[2]) for s in shapes] == [(1, 0), (0, 1), (1, 0), (0, 1)]
    assert all(len(s) == 3 for s in shapes), shapes


def test_inflight_outcome_answers_in_one_shape(store: ConversationStore) -> None:
    """Fenced out, not the head, not in flight, nothing seen, a status seen: four fields each time."""
    outcome = raw(store).register_script(lua.INFLIGHT_OUTCOME)
    k = store.keys(CID)
    raw(store).rpush(k.outbox, b"r1\nreply")
    token, _ = store.begin_delivery(CID, 10_000)
    assert token

    def run(tok: int, reply_id: str, part: int) -> list[object]:
        return list(outcome(keys=[k.dfence, k.outbox, k.sent], args=[tok, reply_id, part]))

    shapes = [run(token + 1, "r1", 0), run(token, "r9", 0), run(token, "r1", 1), run(token, "r1", 0)]
    store.record_status(CID, "wamid.A", "sent", reply_id="r1", part=0)
    shapes.append(run(token, "r1", 0))
    assert [s[0] for s in shapes] == [-1, -3, 0, 1, 1] and shapes[3][1] is None and shapes[4][1] == b"sent"
    assert all(len(s) == 4 for s in shapes), shapes
