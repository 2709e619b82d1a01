"""Model-based test of the mailbox protocol (invariants 1-4): two simulated workers and a producer interleave
accept, begin/acquire, head, commit (with and without ``advance``), release, forced release, lease expiry and
worker death in any order hypothesis chooses, on every backend.

The state blob is the list of applied input ids, so after every step we can check against the model:

- order and effect-once: each successful commit applies exactly the oldest unprocessed accepted input, and the
  state lists the applied inputs in acceptance order with no repeats;
- nothing lost: the mailbox holds exactly the accepted inputs not yet processed; dead-lettered inputs are in the
  dead list;
- atomic publish: the outbox holds one reply per applied input, in order; a refused commit changes nothing;
- no lost wake-up: unless a worker died, once every worker has finished the mailbox is empty; after a death the
  conversation is recoverable (lease gone, the sweeper's ``stranded`` lists it).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import hypothesis.strategies as st
import redis
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from worker.errors import StaleLeaseError
from worker.store.redis_store import ConversationStore, Snapshot, StoreLimits

CID = "US.13491208655302741918"
LEASE_MS = 60_000
RARE = 6


@dataclass
class Worker:
    token: int | None = None
    snap: Snapshot | None = None  # the input being worked on (read under ``token``)
    pc: str = "read"  # with no input in hand: "read" the head next, or "release" (the mailbox looked empty)

    def idle(self) -> None:
        self.token = None
        self.snap = None
        self.pc = "read"


def applied_ids(state: bytes | None) -> list[str]:
    return state.decode().split(",")[:-1] if state else []


class MailboxMachine(RuleBasedStateMachine):
    client: redis.Redis  # set by the test

    def __init__(self) -> None:
        super().__init__()
        self.prefix = f"test{uuid.uuid4().hex[:12]}"
        self.store = ConversationStore(self.client, prefix=self.prefix,
                                       limits=StoreLimits(max_inbox=1000, dead_max=1000, trace_max=1000))
        self.workers = [Worker(), Worker()]
        self.accepted: list[str] = []
        self.processed: list[str] = []  # applied or dead-lettered, in commit order
        self.applied: list[str] = []
        self.dead: list[str] = []
        self.died = False
        self.wakeups: list[bool] = []  # queued wake-up tasks (each: begin or acquire), run whenever Celery gets to them
        self.issued = 0  # the latest fencing token handed out

    @initialize()
    def start(self) -> None:
        assert self.store.inbox_depth(CID) == 0

    def teardown(self) -> None:
        try:
            self.finish()
        finally:
            for key in self.client.scan_iter(match=f"{self.prefix}:*", count=1000):
                self.client.delete(key)

    # --- the producer ------------------------------------------------------------------------------

    @rule(use_begin=st.booleans(), wake_now=st.booleans(), resubmit=st.integers(0, 1000))
    def accept(self, use_begin: bool, wake_now: bool, resubmit: int) -> None:
        """A new input, and the webhook retry of an earlier one (ignored as a duplicate). The producer then
        enqueues a wake-up task; with ``wake_now`` a free worker runs it at once."""
        input_id = f"wamid.{len(self.accepted)}"
        result = self.store.accept(CID, f"payload of {input_id}".encode(), input_id)
        assert result.accepted and not result.duplicate
        self.accepted.append(input_id)
        depth = self.store.inbox_depth(CID)
        again = self.store.accept(CID, b"resubmitted", self.accepted[resubmit % len(self.accepted)])
        assert again.duplicate and not again.accepted and self.store.inbox_depth(CID) == depth
        self.wakeups.append(use_begin)
        if wake_now:
            self.run_wakeup(0, len(self.wakeups) - 1, redeliver=False)

    # --- the workers -------------------------------------------------------------------------------

    def _start(self, w: int, use_begin: bool) -> None:
        worker = self.workers[w]
        assert worker.token is None
        held = bool(self.client.exists(self.store.keys(CID).lease))
        if use_begin:
            b = self.store.begin(CID, LEASE_MS)
            if b.status == "ok":
                worker.token, worker.snap = b.token, b.snapshot
        else:
            lease = self.store.acquire(CID, LEASE_MS)
            if lease is not None:
                worker.token = lease.token
        if worker.token is not None:
            assert not held, "a lease was handed out while another was live"
            assert worker.token > self.issued, "fencing tokens must increase"
            self.issued = worker.token

    @precondition(lambda self: bool(self.wakeups))
    @rule(w=st.integers(0, 1), which=st.integers(0, 1000), redeliver=st.booleans())
    def run_wakeup(self, w: int, which: int, redeliver: bool) -> None:
        """Celery runs a queued wake-up task (in any order; maybe twice: at-least-once) on a free worker; it
        exits when it finds the lease taken."""
        if self.workers[w].token is not None:
            w = 1 - w
            if self.workers[w].token is not None:
                return  # no free worker: the task waits in the queue
        i = which % len(self.wakeups)
        use_begin = self.wakeups[i] if redeliver else self.wakeups.pop(i)
        self._start(w, use_begin)

    @rule(w=st.integers(0, 1), dead=st.booleans(), advance=st.booleans())
    def step(self, w: int, dead: bool, advance: bool) -> None:
        """The worker does the next thing a drain does: read the head, apply it (or dead-letter it), and when
        the mailbox looks empty, release (and go on if ``release`` says more arrived)."""
        worker = self.workers[w]
        if worker.token is None:
            return
        if worker.snap is not None:
            self.commit(w, dead=dead, advance=advance)
        elif worker.pc == "read":
            snap = self.store.head(CID)
            if snap.input is not None:
                worker.snap = snap
            else:
                worker.pc = "release"
        else:
            self.release(w)

    def commit(self, w: int, *, dead: bool, advance: bool) -> None:
        worker = self.workers[w]
        assert worker.token is not None and worker.snap is not None and worker.snap.input_id is not None
        snap, input_id = worker.snap, worker.snap.input_id
        before = self._observed()
        new_state = None if dead else (snap.state or b"") + input_id.encode() + b","
        try:
            result = self.store.commit(
                CID, worker.token, expected_version=snap.version, input_id=input_id, new_state=new_state,
                reply=None if dead else f"reply to {input_id}".encode(), trace=input_id.encode(),
                dead=f"dead {input_id}".encode() if dead else None, lease_ms=LEASE_MS, advance=advance)
        except StaleLeaseError:
            assert self._observed() == before, "a refused commit changed something"
            worker.idle()  # what a fenced-out worker does: drop the input, someone else owns it
            return
        assert worker.token == self.issued, "a fenced-out worker committed"
        # Order and effect-once: exactly the oldest unprocessed input was applied.
        assert input_id == self.accepted[len(self.processed)], (input_id, self.accepted, self.processed)
        self.processed.append(input_id)
        (self.dead if dead else self.applied).append(input_id)
        if not advance:
            worker.snap = None
            worker.pc = "read"
        elif result.released:
            assert self.store.inbox_depth(CID) == 0
            worker.idle()
        else:
            assert result.next is not None and result.next.input_id == self.accepted[len(self.processed)]
            worker.snap = result.next

    def release(self, w: int) -> None:
        worker = self.workers[w]
        assert worker.token is not None and worker.snap is None
        more = self.store.release(CID, worker.token)
        if more:
            assert self.store.inbox_depth(CID) > 0 and worker.token == self.issued
            worker.pc = "read"
        else:
            worker.idle()

    @rule(kind=st.sampled_from(["give up", "lease runs out", "worker dies"]), w=st.integers(0, 1),
          roll=st.integers(0, RARE - 1))
    def fault(self, kind: str, w: int, roll: int) -> None:
        """One roll in RARE, so that drains get somewhere between faults:

        - give up: an error mid-turn; the worker releases regardless and re-enqueues a wake-up;
        - lease runs out: a GC pause, SIGSTOP or slow model outlives the lease (the key expires: deleted here);
        - worker dies: SIGKILL; the worker vanishes without releasing; its lease runs out later.
        """
        worker = self.workers[w]
        if roll != 0:
            return
        if kind == "lease runs out":
            self.lease_runs_out()
        elif worker.token is not None and kind == "give up":
            self.store.release(CID, worker.token, force=True)
            worker.idle()
            self.wakeups.append(False)
        elif worker.token is not None:
            worker.idle()
            self.died = True

    def lease_runs_out(self) -> None:
        self.client.delete(self.store.keys(CID).lease)

    # --- checks ------------------------------------------------------------------------------------

    def _observed(self) -> tuple[list[str], list[str], list[str], list[bytes], int]:
        snap = self.store.head(CID)
        return ([i for i, _ in self.store.inbox(CID)], applied_ids(snap.state),
                [i for i, _ in self.store.outbox(CID)], self.store.dead_letters(CID), snap.version)

    @invariant()
    def matches_the_model(self) -> None:
        inbox, state, outbox, dead, _ = self._observed()
        assert inbox == self.accepted[len(self.processed):], "an accepted input was lost or duplicated"
        assert state == self.applied, "the state does not list the applied inputs once each, in order"
        assert outbox == self.applied, "replies do not match the applied inputs"
        assert dead == [f"dead {i}".encode() for i in self.dead]
        assert len(set(self.processed)) == len(self.processed)

    def _drain(self, w: int) -> None:
        for _ in range(10_000):
            if self.workers[w].token is None:
                return
            self.step(w, dead=False, advance=False)
        raise AssertionError("drain did not finish")

    def finish(self) -> None:
        # Every worker that still holds a lease finishes its drain.
        for w in (0, 1):
            self._drain(w)
        # The wake-up tasks still queued run now (a worker that finds the lease taken exits, as in production).
        while self.wakeups:
            self.run_wakeup(0, 0, redeliver=False)
            self._drain(0)
        if not self.died:
            assert self.store.inbox_depth(CID) == 0, "inputs left with nobody draining: a lost wake-up"
        elif self.store.inbox_depth(CID):
            # The dead worker's lease runs out; the sweeper then finds the conversation and wakes it.
            self.lease_runs_out()
            assert CID in self.store.stranded(100, older_than_ms=0)
            self._start(0, use_begin=True)
            self._drain(0)
        assert self.store.inbox_depth(CID) == 0
        self.matches_the_model()
        assert self.processed == self.accepted


def test_two_workers_never_lose_duplicate_or_reorder(client: redis.Redis, backend: str) -> None:
    machine = type("Machine", (MailboxMachine,), {"client": client})
    run_state_machine_as_test(machine, settings=settings(
        max_examples=80 if backend == "fakeredis" else 40, stateful_step_count=60, deadline=None,
        suppress_health_check=[HealthCheck.too_slow], derandomize=False))
