"""One player's flood on the stream inlet, this tree against another (e.g. main) in one run: the inlet's step time
and Redis's latency to other clients with ``--n`` held entries.

    git archive main | tar -x -C /tmp/old      # or: git worktree add --detach /tmp/old main
    python bench/inlet_flood.py --old /tmp/old [--n 10000] [--rounds 2]

Each child (one per tree and round, the order alternating: bench/two_trees.py) has a redis-server of the run's own
and one inlet (batch 100): the flooder's mailbox is full, ``--n`` of its entries are pending and held by that inlet
(its messages as varied as players': bench/player_texts.py). Then, each step after 50 entries of 50 other players
were added to the stream: 5 reading steps (the retry not due) and 1 step whose retry is due. Meanwhile another
process PINGs Redis in a loop: its round trips during the steps, against its round trips with Redis idle in the same
child (the baseline), say how long Redis made everyone else wait. Also counted: how many of the other players'
entries each reading step accepted (the old inlet held them all once the flood passed the 10,000 pending entries it
examined).
"""

from __future__ import annotations

import json
import multiprocessing
import statistics
import sys
import time
from typing import Any

from player_texts import player_message
from two_trees import options, run_alternating

STREAM, GROUP, OTHERS = "parley:inlet", "g", 50


def _pinger(port: int, stop: Any, out: Any) -> None:
    import redis

    r = redis.Redis(port=port)
    samples: list[tuple[float, float]] = []
    while not stop.is_set():
        t0 = time.perf_counter()
        r.ping()
        samples.append((t0, time.perf_counter() - t0))
    out.send(samples)


def _percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def child(port: int, n: int) -> dict[str, float]:
    import redis

    from worker.client import ConversationClient
    from worker.inlet.stream import Inlet
    from worker.store.limits import StoreLimits
    from worker.store.redis_store import ConversationStore

    r = redis.Redis(port=port)
    r.flushall()
    store = ConversationStore(r, prefix="b", limits=StoreLimits(max_inbox=10))
    client = ConversationClient(store, wake=lambda cid: None)
    for i in range(10):
        client.send_message("flooder", "earlier", message_id=f"full-{i}")
    pipe = r.pipeline(transaction=False)
    size = 0
    for i in range(n):
        envelope = json.dumps({"kind": "message", "conversation_id": "flooder", "text": player_message(f"f{i}"),
                               "message_id": f"flood-{i}"})
        size += len(envelope)
        pipe.xadd(STREAM, {"envelope": envelope})
    pipe.execute()
    inlet = Inlet(r, client, STREAM, GROUP, "a", batch=n, block_ms=1, retry_seconds=3600)
    inlet.ensure_group()
    inlet.apply(inlet._read(">"))  # the flood read and held: its mailbox is full
    inlet.batch = 100
    if hasattr(inlet, "retry_budget"):
        inlet.retry_budget = 1000  # the default: PARLEY_INLET_RETRY_BUDGET
        inlet._rescan = None  # its pending entries are all held already: the start's one look at them is done
    inlet._claim_at = time.monotonic() + 3600
    held = int(r.xpending(STREAM, GROUP)["pending"])

    stop, (receive, send) = multiprocessing.Event(), multiprocessing.Pipe(duplex=False)
    pinger = multiprocessing.Process(target=_pinger, args=(port, stop, send))
    pinger.start()
    time.sleep(1.0)  # the baseline: Redis idle
    idle_until = time.perf_counter()
    windows: list[tuple[str, float, float]] = []
    accepted_others = []
    for s in range(6):
        pipe = r.pipeline(transaction=False)
        for p in range(OTHERS):
            pipe.xadd(STREAM, {"envelope": json.dumps({"kind": "message", "conversation_id": f"player-{s}-{p}",
                                                       "text": player_message(f"p{s}-{p}"),
                                                       "message_id": f"p-{s}-{p}"})})
        pipe.execute()
        kind = "retry" if s == 5 else "read"
        inlet._retry_at = 0.0 if kind == "retry" else time.monotonic() + 3600
        t0 = time.perf_counter()
        done = inlet.step()
        windows.append((kind, t0, time.perf_counter()))
        if kind == "read":
            accepted_others.append(done)
    stop.set()
    samples = receive.recv()
    pinger.join()
    idle = [rtt for t, rtt in samples if t < idle_until]
    busy = [rtt for t, rtt in samples if any(a <= t <= b for _, a, b in windows)]
    steps = {kind: [b - a for k, a, b in windows if k == kind] for kind in ("read", "retry")}
    return {"held": held, "entry_bytes": size / max(n, 1), "read_step_ms": statistics.median(steps["read"]) * 1e3,
            "retry_step_ms": steps["retry"][0] * 1e3, "others_accepted": statistics.mean(accepted_others),
            "ping_idle_p50_us": _percentile(idle, 0.5) * 1e6, "ping_idle_p99_us": _percentile(idle, 0.99) * 1e6,
            "ping_step_p50_us": _percentile(busy, 0.5) * 1e6, "ping_step_p99_us": _percentile(busy, 0.99) * 1e6,
            "ping_step_max_us": max(busy, default=float("nan")) * 1e6, "pings_in_steps": len(busy)}


def main() -> None:
    opts = options(n=10_000, rounds=2)
    runs = run_alternating(__file__, opts)
    med = {label: {k: statistics.median(run[k] for run in runs[((), label)]) for k in runs[((), label)][0]}
           for label in ("old", "new")}
    old, new = med["old"], med["new"]
    print(f"{opts.n} held entries of one player (~{new['entry_bytes']:.0f} bytes each), {OTHERS} other players' "
          f"entries per step, medians over {opts.rounds} rounds")
    for key in ("read_step_ms", "retry_step_ms", "others_accepted", "ping_idle_p50_us", "ping_step_p50_us",
                "ping_step_p99_us", "ping_step_max_us"):
        ratio = new[key] / old[key] if old[key] else float("nan")
        print(f"  {key:18s} old {old[key]:10.1f}   new {new[key]:10.1f}   new/old {ratio:.3f}")
    for label in ("old", "new"):
        m = med[label]
        print(f"  {label}: PING during a step / idle: p50 {m['ping_step_p50_us'] / m['ping_idle_p50_us']:.1f}x, "
              f"p99 {m['ping_step_p99_us'] / m['ping_idle_p99_us']:.1f}x")
        print(f"  {label} rounds:", [{k: round(v, 1) for k, v in run.items()} for run in runs[((), label)]])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(child(int(sys.argv[2]), int(sys.argv[3]))))
    else:
        main()
