"""What waiting for a replica costs, and how long a Sentinel failover takes, on a real master, replica and three
sentinels started on this machine (tests/support/redis_sentinel.py).

Printed: the store's accept + begin + commit per turn with PARLEY_REDIS_WAIT_REPLICAS=0 (the baseline) and =1, in
the same run and alternated in rounds (so drift on a shared machine hits both alike), as ms per turn and the ratio;
then ``--failovers`` graceful failovers (SENTINEL FAILOVER until every sentinel agrees and the old master has
resynced) and the time until the store, asked through the sentinels, commits again.

    python bench/sentinel_wait.py [--turns 2000] [--rounds 3] [--failovers 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.redis_sentinel import start_sentinel
from worker.errors import StoreUnavailableError
from worker.queue.connections import build_store
from worker.settings import Settings
from worker.store.redis_store import ConversationStore


def turns(store: ConversationStore, cid: str, n: int) -> float:
    """Seconds per turn: accept an input, begin, commit a small state (the store's part of a chat turn)."""
    t = time.perf_counter()
    for i in range(n):
        store.accept(cid, b"payload", f"{cid}-{i}")
        begin = store.begin(cid, 10_000)
        assert begin.snapshot is not None
        store.commit(cid, begin.token, expected_version=begin.snapshot.version, input_id=f"{cid}-{i}",
                     new_state=b"x" * 2000, lease_ms=10_000)
    return (time.perf_counter() - t) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--failovers", type=int, default=3)
    args = ap.parse_args()
    setup = start_sentinel()
    try:
        stores = {n: build_store(Settings(_env_file=None, redis_url=setup.url, key_prefix=f"b{n}",  # type: ignore[call-arg]
                                          redis_wait_replicas=n)) for n in (0, 1)}
        per: dict[int, list[float]] = {0: [], 1: []}
        for r in range(args.rounds):
            for n in (0, 1):
                per[n].append(turns(stores[n], f"44770090{n}{r:03d}", args.turns))
        w0, w1 = statistics.median(per[0]), statistics.median(per[1])
        print(f"store's part of a turn (accept, begin, commit), {args.turns} turns x {args.rounds} rounds: "
              f"WAIT 0 {w0 * 1e3:.3f} ms, WAIT 1 {w1 * 1e3:.3f} ms = {w1 / w0:.2f}x")
        for f in range(args.failovers):
            took = setup.failover(resynced=False)
            t = time.monotonic()
            while True:
                try:
                    turns(stores[0], f"4477009f{f:04d}", 1)
                    break
                except StoreUnavailableError:
                    time.sleep(0.05)
            print(f"failover {f + 1}: sentinels agreed in {took:.2f} s; the store committed again "
                  f"{time.monotonic() - t:.2f} s after that")
            time.sleep(2.0)  # the old master resyncs as a replica before the next one
    finally:
        setup.stop()


if __name__ == "__main__":
    main()
