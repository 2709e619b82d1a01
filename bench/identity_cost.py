"""What the identity links cost, against a plain GET of the same client in the same run (one round trip).

    python bench/identity_cost.py [--n 5000]

Starts a redis-server of its own on a free port (tests/support/redis_server.py). Measured, p50 and p99 of ``--n``
calls each:

- ``GET``: the baseline.
- ``recipient_now``: the deliverer's read before a reply's first send (the player's current ids).
- ``link phone only``: a webhook record of a phone-keyed player (no BSUID): the common case.
- ``link both, linked``: a record naming a phone number and a BSUID already linked.
- ``link BSUID only``: a record naming only the BSUID of a phone-keyed player (two reads).
- ``link both, first``: the first record naming both (the transaction that writes the link).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tree's tests.support and worker, run from bench/

from tests.support.redis_server import start_redis
from worker.store.redis_store import ConversationStore


def percentiles(fn: Callable[[int], object], n: int) -> str:
    took = []
    for i in range(n):
        start = time.perf_counter()
        fn(i)
        took.append(time.perf_counter() - start)
    took.sort()
    return f"p50 {took[n // 2] * 1e6:6.0f} µs   p99 {took[int(n * 0.99)] * 1e6:6.0f} µs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000)
    n = parser.parse_args().n
    server = start_redis()
    try:
        store = ConversationStore(redis.Redis(port=server.port), prefix="bench")

        def phone(i: int) -> str:
            return f"4477009{i:05d}"

        for _ in range(2000):  # warm the connection and the server first
            store._client.get("x")
        rows = [("GET", lambda i: store._client.get("x")),
                ("recipient_now", lambda i: store.recipient_now(phone(i), phone(i))),
                ("link phone only", lambda i: store.link_identity(phone(i), None))]
        for name, fn in rows:
            print(f"{name:20} {percentiles(fn, n)}")
        for i in range(n):
            store.link_identity(phone(i), f"US.{i}")
        for name, fn in (("link both, linked", lambda i: store.link_identity(phone(i), f"US.{i}")),
                         ("link BSUID only", lambda i: store.link_identity(None, f"US.{i}")),
                         ("link both, first", lambda i: store.link_identity(f"4488009{i:05d}", f"US.x{i}"))):
            print(f"{name:20} {percentiles(fn, n)}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
