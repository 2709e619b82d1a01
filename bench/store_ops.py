"""Store operations per second against a real redis-server, with a baseline in the same run: plain unpipelined
SET of the same client (one round trip each), so the figures read as "costs N SETs".

    python bench/store_ops.py [--url redis://127.0.0.1:6379/0] [--n 5000] [--state-bytes 12000]

Measured (each the best of ``--repeat`` runs, single client, one thread):

- ``SET``: the baseline, one round trip.
- ``accept``: one pipelined round trip (ZADD pending + the accept script).
- ``cycle (begin+commit)``: begin + commit for a conversation with one waiting input, the two-round-trip drain
  the worker uses (the commit that empties the mailbox gives the lease up).
- ``cycle ... with state``: the same with a state blob of ``--state-bytes`` written by every commit.

Uses a random key prefix and deletes its keys afterwards (the server may be shared; never FLUSHALL).
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable

import redis

from worker.store.redis_store import ConversationStore, StoreLimits


def best_rate(fn: Callable[[int], None], n: int, repeat: int) -> float:
    """Operations per second of ``fn(i)`` over ``n`` calls, best of ``repeat`` runs."""
    best = float("inf")
    for r in range(repeat):
        base = r * n
        t = time.perf_counter()
        for i in range(n):
            fn(base + i)
        best = min(best, time.perf_counter() - t)
    return n / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--n", type=int, default=5000, help="operations per run (bounded)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--state-bytes", type=int, default=12_000, help="state blob size for the 'with state' cycle")
    args = ap.parse_args()
    n, repeat = max(1, min(args.n, 200_000)), max(1, min(args.repeat, 10))

    client = redis.Redis.from_url(args.url)
    client.ping()
    prefix = f"bench{uuid.uuid4().hex[:10]}"
    store = ConversationStore(client, prefix=prefix, limits=StoreLimits(max_inbox=100_000))
    blob = b"s" * args.state_bytes
    payload = b"\x85\xa4kind\xa7message" + b"x" * 120  # about the size of a small envelope

    def set_op(i: int) -> None:
        client.set(f"{prefix}:set:{i % 1000}", payload)

    def accept_op(i: int) -> None:
        store.accept(f"acc{i % 500}", payload, f"wamid.{i}")

    def begin_commit(state: bytes | None) -> Callable[[int], None]:
        def cycle(i: int) -> None:
            cid = f"c2-{len(state or b'')}-{i}"
            store.accept(cid, payload, "m1")
            b = store.begin(cid, 60_000)
            assert b.status == "ok" and b.snapshot is not None
            res = store.commit(cid, b.token, expected_version=b.snapshot.version, input_id="m1",
                               new_state=state or b"state", reply=b"reply", trace=b"trace", lease_ms=60_000)
            assert res.released
        return cycle

    def accept_only(prefix_: str) -> Callable[[int], None]:
        def op(i: int) -> None:
            store.accept(f"{prefix_}{i}", payload, "m1")
        return op

    try:
        base = best_rate(set_op, n, repeat)
        rows: list[tuple[str, float, float]] = [("SET (baseline, 1 round trip)", base, 1.0)]
        rows.append(("accept", best_rate(accept_op, n, repeat), 0.0))
        # A cycle includes its own accept; subtract it to get the drain alone.
        for k, (label, make, state) in enumerate([
            ("cycle: begin+commit", begin_commit, None),
            (f"cycle: begin+commit, {len(blob)} B state", begin_commit, blob),
        ]):
            with_accept = best_rate(make(state), n, repeat)
            acc = best_rate(accept_only(f"acc{k}-"), n, repeat)
            drain = 1 / (1 / with_accept - 1 / acc)
            rows.append((label + " (+accept)", with_accept, 0.0))
            rows.append((label + " (drain alone)", drain, 0.0))
        print(f"redis at {args.url}, n={n}, best of {repeat}")
        print(f"{'operation':<62} {'ops/s':>10} {'SETs per op':>12}")
        for label, rate, _ in rows:
            print(f"{label:<62} {rate:>10,.0f} {base / rate:>12.2f}")
    finally:
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(key)


if __name__ == "__main__":
    main()
