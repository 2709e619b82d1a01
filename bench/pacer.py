"""Delivered messages per second through the shared pace, against the configured limit.

    python bench/pacer.py [--url redis://127.0.0.1:6379/0] [--limits 80,250,1000] [--seconds 4]

For each limit: one-part replies wait in the outboxes of many conversations (each opened by a player's message, so
the window is open); two processes of eight threads each deliver them through the real deliverer (claim, the
window's read, the pace, the send, the sent mark) to the light loopback WhatsApp of ``loopback_peers.py``, paced
through one Redis at that many messages a second. The figure is the stand-in's count of sends over ``--seconds``
once the opening burst has gone, divided by the limit: 1.00 means the fleet used the whole allowance and no more.
The first row is the same rig unpaced (the pace off): what this machine can deliver at all, the ceiling a limit
above it cannot reach.

Uses a random key prefix and deletes its keys afterwards (the server may be shared; never FLUSHALL).
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis
from worker_bench import Peers

from worker.channels.pacing import Pacer
from worker.channels.whatsapp import WhatsAppSender
from worker.envelopes.inputs import ReplyRecord
from worker.service import Deliverer, Heartbeat, ServiceConfig
from worker.settings import Delivery
from worker.store.redis_store import ConversationStore, PaceLimits, StoreLimits

PROCESSES, THREADS = 2, 8
WARM_UP = 1.0  # seconds: the burst goes at once, then the pace holds
SENDER = "106540352242922"
UNPACED_GUESS = 2000.0  # replies to queue for the unpaced run, a second (more than this rig delivers)


def fill(store: ConversationStore, cids: list[str]) -> None:
    """One reply waiting in each conversation's outbox, as a drain would have committed it."""
    for cid in cids:
        store.accept(cid, b"m", f"{cid}-in", inbound=True)
        begin = store.begin(cid, 60_000)
        assert begin.snapshot is not None and begin.snapshot.input_id is not None
        reply = ReplyRecord(reply_id=begin.snapshot.input_id, conversation_id=cid, recipient=cid, parts=["ack"])
        store.commit(cid, begin.token, expected_version=begin.snapshot.version, input_id=begin.snapshot.input_id,
                     new_state=b"s", reply=reply.to_bytes())


def deliver_all(url: str, prefix: str, wa_url: str, limit: float, cids: list[str], deadline: float) -> None:
    """One worker process: THREADS threads deliver ``cids`` until they run out or the deadline passes."""
    store = ConversationStore(redis.Redis.from_url(url, max_connections=THREADS * 2), prefix=prefix,
                              limits=StoreLimits(max_inbox=10))
    pacer = Pacer(store, SENDER, PaceLimits(per_second=limit, burst=10), max_sleep=2.0)
    sender = WhatsAppSender(phone_number_id=SENDER, access_token="bench", base_url=wa_url, pacer=pacer)
    deliverer = Deliverer(store, sender, ServiceConfig(delivery=Delivery(status_webhooks=False)), Heartbeat(3.0, 600.0))
    todo = iter(cids)
    lock = threading.Lock()

    def run() -> None:
        while time.time() < deadline:
            with lock:
                cid = next(todo, None)
            if cid is None:
                return
            deliverer.deliver(cid)

    threads = [threading.Thread(target=run) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sender.close()


def one_limit(url: str, client: redis.Redis, peers: Peers, limit: float, seconds: float) -> float:
    prefix = f"bench{uuid.uuid4().hex[:10]}"
    store = ConversationStore(client, prefix=prefix, limits=StoreLimits(max_inbox=10))
    demand = limit or UNPACED_GUESS
    cids = [f"4479{i:08d}" for i in range(int(demand * (WARM_UP + seconds) * 1.3) + 200)]
    try:
        fill(store, cids)
        deadline = time.time() + WARM_UP + seconds + 1.0
        ctx = multiprocessing.get_context("fork")
        procs = [ctx.Process(target=deliver_all, args=(url, prefix, peers.wa_url, limit, cids[i::PROCESSES],
                                                        deadline)) for i in range(PROCESSES)]
        for p in procs:
            p.start()
        time.sleep(WARM_UP)
        s0, t0 = peers.stats()["sends"], time.perf_counter()
        time.sleep(seconds)
        s1, t1 = peers.stats()["sends"], time.perf_counter()
        for p in procs:
            p.join(60)
        rate = (s1 - s0) / (t1 - t0)
        left = sum(store.outbox_depth(c) for c in cids[-50:])
        assert left > 0, "the outboxes ran dry before the end: the figure would be short of demand, not of pace"
        return rate
    finally:
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(key)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--limits", default="80,250,1000", help="messages a second, comma-separated")
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args()
    client = redis.Redis.from_url(args.url)
    client.ping()
    peers = Peers(delay=0.0)
    try:
        print(f"{PROCESSES} processes x {THREADS} threads, one Redis; steady {args.seconds:.0f} s after a "
              f"{WARM_UP:.0f} s warm-up")
        print(f"{'limit/s':>8} {'delivered/s':>12} {'ratio':>6}")
        ceiling = one_limit(args.url, client, peers, 0.0, args.seconds)
        print(f"{'off':>8} {ceiling:12.1f} {'':>6}", flush=True)
        for limit in (float(x) for x in args.limits.split(",")):
            rate = one_limit(args.url, client, peers, limit, args.seconds)
            print(f"{limit:8.0f} {rate:12.1f} {rate / limit:6.3f}", flush=True)
    finally:
        peers.stop()


if __name__ == "__main__":
    main()
