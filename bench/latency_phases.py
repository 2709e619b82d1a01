"""Where a chat turn's latency goes inside a real Celery worker, against a no-op Celery round trip in the same run.

    python bench/latency_phases.py [--samples 300] [--pool threads|gevent] [--no-typing] [--variant ...] [--rounds N]

``worker_bench.py`` part 2 gives the committed latency as one figure; this script splits it. The worker process is
started with a probe (a ``sitecustomize`` on its ``PYTHONPATH``, written to a temporary folder) that notes the wall
clock at each step of a turn into a file: the message received by the consumer, the task started in the pool,
the drain begun (lease and state), the model call's start and end, the commit done. The bench notes when it called
``send_message``, when that returned (the accept and the wake-up's publish) and when Redis told it the reply was
committed (a keyspace notification, as in ``worker_bench.py``). One clock (one host), medians over the samples,
each step as its offset from the enqueue and as the time since the step before. An instant loopback model and
WhatsApp run in their own process (``loopback_peers.py``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from worker_bench import Peers, Rig

from tests.support.workers import WorkerProcess, wait_until

PROBE = '''
import os, time, threading
_out = open(os.environ["PARLEY_LATENCY_PROBE"], "a", buffering=1)
_lock = threading.Lock()

def note(step, cid):
    t = time.time()
    with _lock:
        _out.write(f"{cid} {step} {t:.6f}\\n")

def _patch():
    from celery import signals
    from worker.service import drain as drain_mod
    from worker.llm import openai_chat
    from worker.store import mailbox

    @signals.task_received.connect(weak=False)
    def _received(request=None, **_):
        if request is not None and request.name == "parley.drain":
            note("received", request.args[0])

    @signals.task_prerun.connect(weak=False)
    def _prerun(task=None, args=None, **_):
        if task is not None and task.name == "parley.drain":
            note("task", args[0])

    def wrap(cls, name, before, after, cid_of):
        real = getattr(cls, name)
        def wrapper(self, *a, **k):
            cid = cid_of(self, a, k)
            if before: note(before, cid)
            try:
                return real(self, *a, **k)
            finally:
                if after: note(after, cid)
        setattr(cls, name, wrapper)

    first = lambda self, a, k: a[0] if a else k.get("cid", "?")
    wrap(drain_mod.Drainer, "drain", "drain", None, first)
    wrap(mailbox.MailboxStore, "begin", None, "begun", first)
    wrap(mailbox.MailboxStore, "commit", "commit", "committed", first)
    real_complete = openai_chat.OpenAIChatModel.complete
    def complete(self, request, *a, **k):
        note("model", "?")
        try:
            return real_complete(self, request, *a, **k)
        finally:
            note("answered", "?")
    openai_chat.OpenAIChatModel.complete = complete

if os.environ.get("PARLEY_LATENCY_PROBE"):
    _patch()
'''

STEPS = ["send", "accepted", "received", "task", "drain", "begun", "model", "answered", "commit", "committed",
         "notified"]


def noop_round_trips(rig: Rig, samples: int) -> list[float]:
    key = "bench:ping"
    rtt = []
    for _ in range(samples):
        rig.app.send_task("parley.ping", args=[key, time.time()])
        _, v = rig.r.blpop(key, 10)
        a, b = v.decode().split(":")
        rtt.append(float(b) - float(a))
        time.sleep(0.01)
    return rtt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--pool", default="threads", choices=["threads", "gevent"])
    ap.add_argument("--no-typing", action="store_true", help="turn the read mark and typing indicator off")
    ap.add_argument("--variant", action="append", metavar="NAME=VALUE[,NAME=VALUE]",
                    help="measure once per variant (these settings for the worker and the producer), one after the "
                         "other in this run, e.g. --variant PARLEY_BROKER_WAKE_IN_ACCEPT=false "
                         "--variant PARLEY_BROKER_WAKE_IN_ACCEPT=true (old against new)")
    ap.add_argument("--rounds", type=int, default=1, help="how many times the variants are measured, in turn")
    args = ap.parse_args()
    variants = [dict(kv.split("=", 1) for kv in v.split(",")) for v in args.variant or [""] if v] or [{}]
    rig = Rig(no_typing=args.no_typing)
    peers = Peers(delay=0.0)
    try:
        for r in range(args.rounds):
            for variant in variants:
                bench, lines, rtt = measure(rig, peers, args.pool, args.samples, variant, f"{r}")
                label = ", ".join(f"{k}={v}" for k, v in variant.items()) or "as configured"
                print(f"== {args.pool} pool, {label}")
                report(bench, lines, rtt)
    finally:
        peers.stop()
        rig.stop()


def measure(rig: Rig, peers: Peers, pool: str, samples: int, variant: dict[str, str],
            run: str) -> tuple[dict[str, dict[str, float]], list[str], list[float]]:
    """One worker with ``variant`` in its environment, its no-op round trips, then ``samples`` turns from a producer
    with the variant's settings; the bench's marks and the worker's probe notes."""
    probe_dir = tempfile.mkdtemp(prefix="parley-probe-")
    Path(probe_dir, "sitecustomize.py").write_text(PROBE)
    notes = Path(probe_dir, "notes.txt")
    root = str(Path(__file__).resolve().parents[1])
    env = {**rig.env, "OPENAI_BASE_URL": peers.llm_url, "WHATSAPP_API_BASE_URL": peers.wa_url,
           "PYTHONPATH": os.pathsep.join([probe_dir, root]), "PARLEY_LATENCY_PROBE": str(notes), **variant}
    client = rig.client_for(variant)
    w = WorkerProcess(rig.unique(f"latency-phases-{pool}"), env, pool=pool, concurrency=16).start()
    try:
        wait_until(lambda: "[tasks]" in w.log(), 60)
        rtt = noop_round_trips(rig, samples)
        rig.r.config_set("notify-keyspace-events", "Kl")
        events = rig.r.pubsub(ignore_subscribe_messages=True)
        bench: dict[str, dict[str, float]] = {}
        for i in range(samples):
            cid = f"4479{run}{len(rig.variants_run)}{i % 50:05d}"
            events.subscribe(f"__keyspace@0__:{client.store.keys(cid).outbox}")
            events.get_message(timeout=1.0)
            mine = bench.setdefault(f"{cid}#{i}", {"cid": 0.0})
            mine["send"] = time.time()
            client.send_message(cid, f"hi {i}", message_id=f"lp{run}-{len(rig.variants_run)}-{i}")
            mine["accepted"] = time.time()
            deadline = mine["send"] + 10
            while time.time() < deadline:
                m = events.get_message(timeout=max(0.0, deadline - time.time()))
                if m is not None and m["data"] == b"rpush":
                    mine["notified"] = time.time()
                    break
            events.unsubscribe()
            time.sleep(0.02)  # the delivery and its probes land before the next sample
        events.close()
    finally:
        w.stop()
        rig.variants_run.append(pool)
    return bench, notes.read_text().splitlines(), rtt


def report(bench: dict[str, dict[str, float]], lines: list[str], rtt: list[float]) -> None:
    """Attach the worker's notes to each sample by time (one turn at a time, so each falls between a send and the
    next send) and print the medians."""
    samples = sorted(bench.values(), key=lambda s: s["send"])
    stamps = sorted((float(t), step) for _, step, t in (line.split() for line in lines))
    rows: dict[str, list[float]] = {s: [] for s in STEPS}
    gaps: dict[str, list[float]] = {s: [] for s in STEPS}
    j = 0
    for n, s in enumerate(samples):
        end = samples[n + 1]["send"] if n + 1 < len(samples) else float("inf")
        got = dict(s)
        while j < len(stamps) and stamps[j][0] < end:
            t, step = stamps[j]
            if t >= s["send"] and step not in got:
                got[step] = t
            j += 1
        if not all(k in got for k in STEPS):
            continue
        prev = got["send"]
        for step in STEPS:
            rows[step].append(got[step] - got["send"])
            gaps[step].append(got[step] - prev)
            prev = got[step]
    b50 = statistics.median(rtt)
    print(f"no-op Celery round trip p50 {b50 * 1e3:.3f} ms; {len(rows['send'])} turns with every step noted")
    print(f"{'step':12s} {'since enqueue':>14s} {'since the step before':>22s}")
    for step in STEPS[1:]:
        print(f"{step:12s} {statistics.median(rows[step]) * 1e3:11.3f} ms {statistics.median(gaps[step]) * 1e3:19.3f} ms")
    print(f"committed / no-op round trip: {statistics.median(rows['committed']) / b50:.2f}x "
          f"(notified: {statistics.median(rows['notified']) / b50:.2f}x)")


if __name__ == "__main__":
    main()
