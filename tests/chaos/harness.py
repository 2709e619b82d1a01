"""A Jepsen-style checker for Parley: load many conversations through real workers while faults are
injected, then check every conversation's history and deliveries.

Per conversation, inputs are accepted in a known order. Afterwards the trace (what the workers applied)
and the WhatsApp stand-in (what was sent) are compared with that order:

- lost: accepted but neither applied nor dead-lettered;           must be 0
- duplicated: applied more than once;                               must be 0
- reordered: applied out of acceptance order;                       must be 0
- stranded: still waiting in a mailbox or outbox at the end;        must be 0
- reply lost / reordered: an applied turn's reply missing / out of order;    must be 0
- reply duplicated: sent twice; at most the crashes that landed inside the send window (counted by the
  workers as "resending a part whose send outcome is unknown").

Bursts (``Load.burst_max`` > 1 sends players' bursts): a turn that took in several inputs is one trace entry whose
``burst`` lists them, head first; each counts as applied by that turn, and the turn's one reply answers its last
message, so the messages before it in the burst expect no reply of their own.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import msgpack

from tests.e2e.conftest import Cluster
from tests.support.store_kit import raw as raw_client
from tests.support.workers import WorkerProcess, wait_until

WINDOW_LOG = "resending a part whose send outcome is unknown"


@dataclass
class Outcome:
    conversations: int = 0
    inputs: int = 0
    applied: int = 0
    dead: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    stranded: int = 0
    replies: int = 0
    replies_lost: int = 0
    replies_duplicated: int = 0
    replies_reordered: int = 0
    window_hits: int = 0
    burst_turns: int = 0  # committed turns that took in more than one input
    burst_inputs: int = 0  # the inputs those turns took in
    faults: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    dead_reasons: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        return (f"inputs={self.inputs} applied={self.applied} dead={self.dead} faults={self.faults} "
                f"lost={self.lost} duplicated={self.duplicated} reordered={self.reordered} stranded={self.stranded} "
                f"replies={self.replies} replies_lost={self.replies_lost} replies_reordered={self.replies_reordered} "
                f"replies_duplicated={self.replies_duplicated} window_hits={self.window_hits} "
                f"burst_turns={self.burst_turns} burst_inputs={self.burst_inputs} "
                f"seconds={self.seconds:.1f} dead_reasons={self.dead_reasons} "
                f"restarts={sum(1 for n in self.notes if n.startswith('restarted'))}")

    def assert_safe(self) -> None:
        assert not any(n.startswith("stranded") for n in self.notes), self.notes
        assert (self.lost, self.duplicated, self.reordered, self.stranded) == (0, 0, 0, 0), self.line()
        assert (self.replies_lost, self.replies_reordered) == (0, 0), self.line()
        assert self.replies_duplicated <= self.window_hits, self.line()


@dataclass
class Load:
    conversations: int = 20
    inputs_per: int = 10
    event_every: int = 4
    workers: int = 3
    concurrency: int = 16
    pace: float = 0.002
    settle_timeout: float = 120.0
    burst_max: int = 1  # each round, a player sends 1..burst_max messages, burst_gap apart (an event round: after it)
    burst_gap: float = 0.05
    ready_first: bool = False  # start producing once every worker is up (else the first inputs queue a few seconds)
    worker_env: Callable[[int], dict[str, str]] | None = None  # environment of worker i on top of the cluster's


def run_scenario(cluster: Cluster, load: Load,
                 chaos: Callable[[Cluster, threading.Event, Outcome], None] | None = None) -> Outcome:
    out = Outcome(conversations=load.conversations)
    # A mixed fleet, so every scenario runs through both supported pools: even workers threads, odd gevent.
    for i in range(load.workers):
        cluster.start_worker(f"chaos{i}", concurrency=load.concurrency, pool=("threads", "gevent")[i % 2],
                             env=load.worker_env(i) if load.worker_env else None)
    client = cluster.client()
    cids = [f"4477{i:08d}" for i in range(load.conversations)]
    accepted: dict[str, list[tuple[str, str, str]]] = {c: [] for c in cids}  # (id, kind, text)
    stop = threading.Event()
    chaos_thread = None
    if chaos is not None:
        chaos_thread = threading.Thread(target=chaos, args=(cluster, stop, out), daemon=True)
        chaos_thread.start()
    # A supervisor, as in production (systemd, Kubernetes): a worker process that exits is started again.
    supervising = threading.Event()

    def supervise() -> None:
        while not supervising.wait(0.5):
            for w in cluster.workers:
                if w.proc is not None and w.proc.poll() is not None:
                    out.notes.append(f"restarted {w.name} (exit {w.proc.returncode})")
                    w.start()

    threading.Thread(target=supervise, daemon=True).start()
    if load.ready_first:
        wait_until(lambda: all(" ready." in w.log() for w in cluster.workers), 30, interval=0.1)
    started = time.monotonic()
    for n in range(load.inputs_per):
        order = cids[:]
        random.shuffle(order)
        for cid in order:
            mid = f"{cid}-{n}"
            if load.event_every and n % load.event_every == load.event_every - 1:
                batch = [(mid, "event", f"{cid} event {n}")]
            else:
                batch = [(mid, "message", f"{cid} q{n}")]
            # A player's burst: more chat messages right behind (none unless the load sends bursts).
            batch += [(f"{mid}.{j}", "message", f"{cid} q{n}.{j}") for j in range(1, random.randint(1, load.burst_max))]
            for i, (mid, kind, text) in enumerate(batch):
                if i:
                    time.sleep(load.burst_gap)
                for attempt in range(50):
                    try:
                        if kind == "event":
                            client.send_event(cid, text, message_id=mid)
                        else:
                            client.send_message(cid, text, message_id=mid)
                        accepted[cid].append((mid, kind, text))
                        break
                    except Exception as exc:  # Redis restarting: the producer retries with the same id
                        if attempt == 49:
                            raise
                        out.notes.append(f"producer retry: {type(exc).__name__}")
                        time.sleep(0.2)
            time.sleep(load.pace)
    out.inputs = sum(len(v) for v in accepted.values())
    store = cluster.store()

    def settled() -> bool:
        try:
            return all(store.inbox_depth(c) == 0 and store.outbox_depth(c) == 0 for c in cids)
        except Exception:
            return False

    # Let the chaos run a little longer than the producer, then stop it and let the system settle.
    time.sleep(1.0)
    stop.set()
    if chaos_thread is not None:
        chaos_thread.join(60)
    for w in cluster.workers:
        if not w.alive():
            out.notes.append(f"restarted {w.name} after the chaos")
            w.start()  # the same process settings (its network namespace too), a new process
    wait_until(settled, load.settle_timeout, interval=0.25)
    supervising.set()
    out.seconds = time.monotonic() - started
    time.sleep(0.5)

    sent_by: dict[str, list[str]] = {c: cluster.whatsapp.texts_for(c) for c in cids}
    for cid in cids:
        trace = [msgpack.unpackb(t, raw=False) for t in store.trace(cid, 100_000)]
        turns = [t for t in trace if not str(t["id"]).startswith("compact-")]
        ids = [mid for t in turns for mid in (t.get("burst") or [t["id"]])]  # a burst turn applied every input
        answered_by_later = {mid for t in turns for mid in (t.get("burst") or [])[:-1]}  # one reply: to the last
        out.burst_turns += sum(1 for t in turns if t.get("burst"))
        out.burst_inputs += sum(len(t.get("burst") or []) for t in turns)
        dead_ids = {t["id"] for t in trace if "dead" in t}
        want = [mid for mid, _, _ in accepted[cid]]
        seen: set[str] = set()
        for mid in ids:
            if mid in seen:
                out.duplicated += 1
            seen.add(mid)
        out.lost += sum(1 for mid in want if mid not in seen)
        first = [mid for i, mid in enumerate(ids) if mid not in ids[:i]]
        if [m for m in first if m in want] != [m for m in want if m in seen]:
            out.reordered += 1
        out.applied += len(seen - dead_ids)
        out.dead += len(dead_ids)
        for t in trace:
            if "dead" in t:
                out.dead_reasons[t["dead"]] = out.dead_reasons.get(t["dead"], 0) + 1
        stuck = store.inbox_depth(cid) + store.outbox_depth(cid)
        out.stranded += stuck
        if stuck:
            k = store.keys(cid)
            out.notes.append(f"stranded {cid}: pending={raw_client(store).zscore(store.g.pending, cid)} "
                             f"lease={raw_client(store).pttl(k.lease)} dlease={raw_client(store).pttl(k.dlease)} hold={raw_client(store).pttl(k.hold)} "
                             f"sent={raw_client(store).hgetall(k.sent)} inbox={store.inbox_depth(cid)} outbox={store.outbox_depth(cid)}")
        expected = [f"ack:{text}" for mid, kind, text in accepted[cid]
                    if kind == "message" and mid not in dead_ids and mid not in answered_by_later]
        got = sent_by[cid]
        out.replies += len(got)
        dedup: list[str] = []
        for t in got:
            if (dedup and dedup[-1] == t) or t in dedup:
                out.replies_duplicated += 1
                continue
            dedup.append(t)
        dead_replies = {d for d in _dead_reply_texts(store, cid)}
        want_replies = [t for t in expected if t not in dead_replies]
        out.replies_lost += sum(1 for t in want_replies if t not in dedup)
        if [t for t in dedup if t in want_replies] != [t for t in want_replies if t in dedup]:
            out.replies_reordered += 1
    out.window_hits = sum(w.log().count(WINDOW_LOG) for w in cluster.workers)
    return out


def _dead_reply_texts(store, cid: str) -> list[str]:  # type: ignore[no-untyped-def]
    from worker.envelopes import decode_dead_letter, decode_reply

    out = []
    for raw in store.dead_letters(cid):
        d = decode_dead_letter(raw)
        if d.what == "reply" and d.payload:
            out.extend(decode_reply(d.payload).parts)
    return out


def restart(w: WorkerProcess) -> WorkerProcess:
    return w.start()
