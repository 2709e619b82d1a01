"""Timers (inputs sent with ``at=``): how late they fire and what they cost at 10,000 pending, against baselines of
the same run on the same redis-server (one of the bench's own, on a free port, so Redis's CPU is Parley's alone).

    python bench/timers.py [--timers 10000] [--window 20] [--loops 2] [--poll 0.2]

1. Schedule ``--timers`` inputs, one per conversation, due uniformly over the next ``--window`` seconds; baseline:
   the same number of plain accepts (``send_event`` without ``at``). Wall time and Redis CPU per input.
2. Fire them with ``--loops`` timer loops (threads of this process, each its own connection, as worker processes
   would; ``--poll`` seconds apart): lateness of each timer (accepted into its mailbox minus its due time) p50 / p99
   / max, and Redis CPU per timer fired against the accept's.
3. Idle: one loop pass over an index holding 10,000 conversations none of which is due (what every worker process
   pays every ``--poll`` seconds), against a PING round trip.

Run it where no other load shares the two cores when the figures matter (bench/README.md records them).
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime

import redis

from worker.client import ConversationClient
from worker.service.timer_loop import TimerLoop
from worker.store.redis_store import ConversationStore, StoreLimits
from worker.store.script_replies import FireReply


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_redis() -> tuple[subprocess.Popen[bytes], int]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("needs a redis-server binary on PATH")
    port = _free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", tempfile.mkdtemp(prefix="parley-bench-"), "--daemonize", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    for _ in range(200):
        try:
            client.ping()
            return proc, port
        except redis.ConnectionError:
            time.sleep(0.05)
    raise SystemExit("redis-server did not start")


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def measured(client: redis.Redis, fn: object, n: int) -> tuple[float, float]:
    """(µs of wall time, µs of Redis CPU) per item of ``fn()`` doing ``n`` items."""
    cpu, t = redis_cpu(client), time.perf_counter()
    fn()  # type: ignore[operator]
    return (time.perf_counter() - t) / n * 1e6, (redis_cpu(client) - cpu) / n * 1e6


class Recording(TimerLoop):
    """A timer loop that keeps the lateness of each timer it fired."""

    late: list[float]

    def _fire(self, cid: str, score: float, now_ms: int) -> int:
        res: FireReply = self.store.fire_due(cid, now_ms, score, retry_ms=self.retry_ms)
        done = time.time()
        self.late.extend(done - due / 1000 for _, due in res.fired)
        return res.accepted


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--timers", type=int, default=10_000)
    ap.add_argument("--window", type=float, default=20.0, help="seconds over which the timers come due")
    ap.add_argument("--loops", type=int, default=2, help="timer loops (as worker processes would run)")
    ap.add_argument("--poll", type=float, default=0.2, help="PARLEY_TIMER_POLL_SECONDS")
    args = ap.parse_args()
    n = max(100, min(args.timers, 100_000))
    proc, port = _start_redis()
    try:
        run(port, n, args.window, max(1, args.loops), args.poll)
    finally:
        proc.terminate()
        proc.wait(10)


def run(port: int, n: int, window: float, loops: int, poll: float) -> None:
    admin = redis.Redis(port=port)
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    store = ConversationStore(redis.Redis(port=port), prefix=prefix, limits=StoreLimits(max_timers=10))
    client = ConversationClient(store, lambda cid: None)
    print(f"timers: {n} pending, one per conversation, due over {window:g} s; {loops} loops polling every "
          f"{poll:g} s; redis-server of its own on port {port}")

    # 1. Scheduling against accepting.
    accept_us = measured(admin, lambda: [client.send_event(f"a{i}", "tagged", message_id=f"e{i}")
                                         for i in range(n)], n)
    start = time.time() + 2.0 + 2.0 * accept_us[0] * n / 1e6  # time to schedule them all before the first is due
    due = [start + window * i / n for i in range(n)]
    schedule_us = measured(admin, lambda: [client.send_event(f"t{i}", "nudge", message_id=f"n{i}",
                                                             at=datetime.fromtimestamp(due[i], UTC))
                                           for i in range(n)], n)
    print(f"  accept (baseline)      {accept_us[0]:7.1f} µs wall  {accept_us[1]:6.1f} µs Redis CPU per input")
    print(f"  schedule (at=)         {schedule_us[0]:7.1f} µs wall  {schedule_us[1]:6.1f} µs Redis CPU per input "
          f"({schedule_us[1] / accept_us[1]:.2f}x the accept's)")
    assert time.time() < start, "scheduling took longer than the head start: lower --timers"

    # 2. Firing.
    stop = threading.Event()
    fired: list[Recording] = []
    for _ in range(loops):
        loop = Recording(ConversationStore(redis.Redis(port=port), prefix=prefix), lambda cid: None)
        loop.late = []
        fired.append(loop)
    threads = [threading.Thread(target=loop.run, args=(stop, poll)) for loop in fired]
    time.sleep(max(0.0, start - time.time()))
    cpu0, proc0 = redis_cpu(admin), time.process_time()
    for t in threads:
        t.start()
    deadline = due[-1] + 10
    while sum(len(loop.late) for loop in fired) < n and time.time() < deadline:
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join()
    fire_cpu = (redis_cpu(admin) - cpu0) / n * 1e6
    client_cpu = (time.process_time() - proc0) / n * 1e6
    late = [x for loop in fired for x in loop.late]
    per_loop = [len(loop.late) for loop in fired]
    sample = range(0, n, max(1, n // 500))
    once = sum(store.inbox_depth(f"t{i}") == 1 for i in sample)
    print(f"  fired {len(late)} of {n} (by loop: {per_loop}); accepted once: {once} of {len(sample)} sampled "
          f"mailboxes hold exactly one input")
    print(f"  lateness  p50 {statistics.median(late) * 1000:6.0f} ms  p99 {pct(late, 0.99) * 1000:6.0f} ms  "
          f"max {max(late) * 1000:6.0f} ms  (poll interval {poll * 1000:.0f} ms)")
    print(f"  fire                   Redis CPU {fire_cpu:6.1f} µs per timer ({fire_cpu / accept_us[1]:.2f}x the "
          f"accept's, polls included); loops' client CPU {client_cpu:6.1f} µs per timer")

    # 3. Idle polling with 10,000 conversations holding timers none of which is due.
    far = datetime.fromtimestamp(time.time() + 86_400, UTC)
    for i in range(10_000):
        client.send_event(f"idle{i}", "later", message_id=f"i{i}", at=far)
    idle = TimerLoop(store, lambda cid: None)
    passes = 2000
    idle_us = measured(admin, lambda: [idle.run_once() for _ in range(passes)], passes)
    ping_us = measured(admin, lambda: [admin.ping() for _ in range(passes)], passes)
    print(f"  idle pass (10,000 held) {idle_us[0]:6.1f} µs wall  {idle_us[1]:6.1f} µs Redis CPU "
          f"(PING: {ping_us[0]:.1f} µs wall, {ping_us[1]:.1f} µs Redis CPU); per worker process at "
          f"{poll:g} s: {idle_us[1] / poll / 1e4:.3f}% of a Redis core")


if __name__ == "__main__":
    main()
