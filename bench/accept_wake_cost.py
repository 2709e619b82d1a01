"""What ``send_message`` itself costs with the wake-up published through kombu and with the accept pushing it (issue
33), old against new in one run, against a redis-server of its own and no worker (nothing competes for the CPU).

    python bench/accept_wake_cost.py [--n 300] [--rounds 6]

Each round sends, for ``n`` fresh conversations, a first input (it needs a wake-up) and one behind it (it does not),
through one client with ``PARLEY_BROKER_WAKE_IN_ACCEPT`` off and one with it on, the order flipped every round; the
queue is emptied between rounds (no worker consumes it). A Redis PING from the same process is the baseline.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.redis_server import start_redis
from worker.client import ConversationClient
from worker.settings import Settings


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    server = start_redis()
    try:
        r = server.client()
        clients = {on: ConversationClient._from_settings(Settings(_env_file=None, redis_url=server.url,  # type: ignore[call-arg]
                                                                  key_prefix=f"p{int(on)}", broker_wake_in_accept=on))
                   for on in (False, True)}
        for on, c in clients.items():
            c.send_message("warm", "x", message_id=f"warm{on}")  # the first publish's imports, the capture
        took: dict[tuple[bool, str], list[float]] = {}
        for rnd in range(args.rounds):
            for on in (False, True) if rnd % 2 == 0 else (True, False):
                for i in range(args.n):
                    cid = f"44{rnd}{int(on)}{i:06d}"
                    for kind in ("first", "behind"):
                        t = time.perf_counter()
                        clients[on].send_message(cid, "hi", message_id=f"{kind}{rnd}{i}")
                        took.setdefault((on, kind), []).append(time.perf_counter() - t)
                r.delete("parley")
        pings = []
        for _ in range(1000):
            t = time.perf_counter()
            r.ping()
            pings.append(time.perf_counter() - t)
        ping = statistics.median(pings)
        print(f"Redis PING p50 {ping * 1e3:.3f} ms")
        for on in (False, True):
            first, behind = statistics.median(took[on, "first"]), statistics.median(took[on, "behind"])
            print(f"PARLEY_BROKER_WAKE_IN_ACCEPT={str(on).lower()}: send_message p50, first input {first * 1e3:.3f} ms "
                  f"({first / ping:.1f} PINGs), an input behind it {behind * 1e3:.3f} ms ({behind / ping:.1f} PINGs)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
