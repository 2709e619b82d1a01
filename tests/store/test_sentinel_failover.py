"""The store on a Sentinel-managed Redis (a real master, replica and three sentinels): it follows a failover, loses
nothing it acknowledged when it waits for the replica (PARLEY_REDIS_WAIT_REPLICAS=1), and the fence still refuses
a writer whose lease predates the failover."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from tests.support.redis_sentinel import SentinelSetup, start_sentinel
from tests.support.workers import wait_until
from worker.errors import StaleLeaseError, StoreUnavailableError
from worker.queue.connections import build_store
from worker.settings import Settings
from worker.store.redis_store import ConversationStore

CID = "447700900600"


@pytest.fixture
def sentinel() -> Iterator[SentinelSetup]:
    s = start_sentinel()
    yield s
    s.stop()


def _store(s: SentinelSetup, replicas: int = 1, timeout: float = 1.0) -> ConversationStore:
    return build_store(Settings(_env_file=None, redis_url=s.url, key_prefix="sent",  # type: ignore[call-arg]
                                redis_wait_replicas=replicas, redis_wait_timeout=timeout))


def _retry(fn, seconds: float = 20):  # type: ignore[no-untyped-def]
    """What a task does: a store that is unavailable during the failover is retried."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return fn()
        except StoreUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _apply(store: ConversationStore, input_id: str, state: bytes) -> None:
    begin = store.begin(CID, 10_000)
    assert begin.snapshot is not None and begin.snapshot.input_id == input_id
    done = store.commit(CID, begin.token, expected_version=begin.snapshot.version, input_id=input_id,
                        new_state=state)
    if done.next is not None:  # it kept the lease for the next input: give it up, the next _apply begins again
        store.release(CID, begin.token)


def _drain_through_failover(store: ConversationStore) -> list[str]:
    """Apply what waits, as a drain task would through a failover: an unavailable store or an unreplicated write
    (an unknown outcome) is retried from ``begin``, which finds the input applied or still waiting. Returns the
    inputs whose commit was acknowledged."""
    acked: list[str] = []
    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, acked
        try:
            if store.inbox_depth(CID) == 0:
                return acked
            begin = store.begin(CID, 500)
            if begin.snapshot is None:  # busy: the lease of an attempt whose outcome was unknown; it runs out
                time.sleep(0.1)
                continue
            head = begin.snapshot.input_id or ""
            done = store.commit(CID, begin.token, expected_version=begin.snapshot.version, input_id=head,
                                new_state=f"state after {head[1:]}".encode(), lease_ms=500)
            acked.append(head)
            if done.next is not None:
                store.release(CID, begin.token)
        except StoreUnavailableError:
            time.sleep(0.2)


def test_acknowledged_writes_survive_a_failover(sentinel: SentinelSetup) -> None:
    store = _store(sentinel)
    for i in range(20):
        store.accept(CID, f"p{i}".encode(), f"i{i}")
    for i in range(10):
        _apply(store, f"i{i}", f"state after {i}".encode())
    old = sentinel.master_name()
    sentinel.failover()
    assert sentinel.master_name() != old
    # Everything acknowledged before the failover is on the new master.
    assert _retry(lambda: store.read_state(CID)).blob == b"state after 9"
    assert _retry(lambda: store.inbox_depth(CID)) == 10
    # And the store goes on: every input applied once, in order, whatever the failover window refused.
    acked = _drain_through_failover(store)
    assert acked == sorted(acked, key=lambda x: int(x[1:])) and acked[-1] == "i19", acked
    # Once the demoted master has caught up with the new one, nothing acknowledged vanished with it.
    master, demoted = sentinel.client(sentinel.master_name()), sentinel.client(old)

    def caught_up() -> bool:
        link = demoted.info("replication")
        return (link.get("master_link_status") == "up"
                and link.get("slave_repl_offset") == master.info("replication")["master_repl_offset"])

    assert wait_until(caught_up, 30)
    assert store.read_state(CID).blob == b"state after 19" and store.inbox_depth(CID) == 0


def test_a_lease_taken_before_the_failover_cannot_commit_after_a_newer_one(sentinel: SentinelSetup) -> None:
    store = _store(sentinel)
    store.accept(CID, b"p", "i1")
    stale = store.begin(CID, 300)  # a worker that then stalls through the failover
    assert stale.snapshot is not None
    sentinel.failover()
    time.sleep(0.4)  # its lease runs out
    fresh = _retry(lambda: store.begin(CID, 10_000))
    assert fresh.snapshot is not None and fresh.token > stale.token
    with pytest.raises(StaleLeaseError):
        store.commit(CID, stale.token, expected_version=stale.snapshot.version, input_id="i1", new_state=b"stale")
    store.commit(CID, fresh.token, expected_version=fresh.snapshot.version, input_id="i1", new_state=b"fresh")
    assert store.read_state(CID).blob == b"fresh"


def test_a_write_the_replica_did_not_acknowledge_is_an_unknown_outcome(sentinel: SentinelSetup) -> None:
    from worker import metrics

    store = _store(sentinel, timeout=0.3)
    store.accept(CID, b"p", "i0")
    short = metrics.REPLICATION_SHORT.labels("accept")
    before = short._value.get()
    replica = sentinel.procs["b"]
    os.kill(replica.pid, signal.SIGSTOP)  # the replica stops acknowledging
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError, match="0 of 1 replicas"):  # not acknowledged: unknown outcome
            store.accept(CID, b"p", "i1")
        waited = time.monotonic() - started
    finally:
        os.kill(replica.pid, signal.SIGCONT)
    assert short._value.get() == before + 1
    assert waited >= 0.25  # the WAIT ran on the writing connection and waited for its timeout
    assert store.inbox_depth(CID) == 2  # it did reach the master: a producer's retry deduplicates on its id
    assert not store.accept(CID, b"p", "i1").accepted


def test_a_delivery_claim_waits_for_the_replica_too(sentinel: SentinelSetup) -> None:
    """A claim marks the part in flight before the send. Not replicated, a failover could drop the mark, and the
    next deliverer would send the part again without knowing it might have gone (a resend nobody counts); so the
    claim waits like the commit, and one no replica acknowledged is an unknown outcome the next claim sees."""
    store = _store(sentinel, timeout=0.3)
    store.accept(CID, b"p", "i0")
    begin = store.begin(CID, 10_000)
    assert begin.snapshot is not None
    store.commit(CID, begin.token, expected_version=0, input_id="i0", new_state=b"s", reply=b"r")
    replica = sentinel.procs["b"]
    os.kill(replica.pid, signal.SIGSTOP)
    try:
        with pytest.raises(StoreUnavailableError, match="0 of 1 replicas"):
            store.begin_delivery(CID, 300)
    finally:
        os.kill(replica.pid, signal.SIGCONT)
    time.sleep(0.4)  # the unacknowledged claim's delivery lease runs out
    token, head = _retry(lambda: store.begin_delivery(CID, 10_000))
    assert token is not None and head is not None and head.reply_id == "i0"
    assert head.crashed_in_window  # the claim did reach the master: its part counts as possibly sent
