"""Quiet conversations beside a flood: what the drain bound (fair scheduling) buys, and what it costs the flood.

One real Celery worker process with one slot (threads pool, concurrency 1), a real redis-server, the loopback OpenAI
stand-in answering in ``--model-ms`` and the loopback WhatsApp stand-in, all on this machine. Quiet players (``--quiet``
conversations, one message each every ``--every`` seconds) are measured from the producer's send to the reply's
arrival at the WhatsApp stand-in, in three phases, each with a fresh worker and key prefix:

- alone: the quiet players only (the baseline);
- flood, bounded: a game engine pushes ``--flood`` inputs into one conversation just before the quiet players
  start, with the default bound (PARLEY_DRAIN_MAX_TURNS=100, PARLEY_DRAIN_MAX_SECONDS=1);
- flood, unbounded: the same with both bounds off (0), as before fair scheduling.

Printed: quiet p50 and p99 latency per phase and as ratios to the baseline of the same run, and the flood's cost:
seconds from its first input to its last reply, per input, bounded against unbounded (the quiet turns are in both).

    python bench/fairness.py [--flood 1000] [--quiet 10] [--every 0.5] [--seconds 8] [--model-ms 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.fake_openai import FakeOpenAI
from tests.support.fake_whatsapp import FakeWhatsApp
from tests.support.redis_server import start_redis
from tests.support.workers import WorkerProcess, wait_until, worker_env
from worker.client import ConversationClient
from worker.settings import Settings


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def run_phase(redis_url: str, llm: FakeOpenAI, wa: FakeWhatsApp, args: argparse.Namespace, *, flood: int,
              bounded: bool) -> tuple[list[float], float]:
    """Quiet latencies (seconds) and the flood's seconds from first input to last reply (0 without a flood)."""
    with wa.lock:
        wa.sent.clear()
        wa.arrivals.clear()
    bounds = {} if bounded else {"PARLEY_DRAIN_MAX_TURNS": "0", "PARLEY_DRAIN_MAX_SECONDS": "0"}
    env = worker_env(redis_url, PARLEY_LLM_PROVIDER="openai", OPENAI_API_KEY="k", OPENAI_BASE_URL=llm.base_url,
                     PARLEY_LLM_MODEL="gpt-4o-mini", WHATSAPP_API_BASE_URL=wa.base_url,
                     WHATSAPP_PHONE_NUMBER_ID="106540352242922", WHATSAPP_ACCESS_TOKEN="test-token",
                     PARLEY_WHATSAPP_RECIPIENT_PER_MINUTE="100000", PARLEY_WHATSAPP_MESSAGES_PER_SECOND="100000",
                     PARLEY_COMPACTION_MAX_TOKENS="100000", PARLEY_LOG_LEVEL="WARNING", **bounds)
    worker = WorkerProcess("fair", env, pool="threads", concurrency=1).start()
    client = ConversationClient._from_settings(Settings(redis_url=redis_url, key_prefix=env["PARLEY_KEY_PREFIX"]))
    try:
        client.send_message("447700900000", "warm up", message_id="warm")
        assert wait_until(lambda: len(wa.sent) >= 1, 60), worker.log()[-2000:]
        flood_cid = "447700999999"
        started = time.monotonic()
        for i in range(flood):
            client.send_message(flood_cid, f"{flood_cid} {i}", message_id=f"f{i}")
        sent_at: dict[str, float] = {}
        stop = time.monotonic() + args.seconds
        n = 0
        while time.monotonic() < stop:
            for q in range(args.quiet):
                cid = f"4477009{q:05d}"
                text = f"{cid} quiet {n}"
                sent_at[f"ack:{text}"] = time.monotonic()
                client.send_message(cid, text, message_id=f"{cid}-{n}")
            n += 1
            time.sleep(args.every)
        want = 1 + flood + len(sent_at)
        assert wait_until(lambda: len(wa.sent) >= want, 600), (len(wa.sent), want, worker.log()[-2000:])
        with wa.lock:
            arrived = {s["body"]["text"]["body"]: t for s, t in zip(wa.sent, wa.arrivals, strict=False)}
        latencies = [arrived[text] - t for text, t in sent_at.items()]
        flood_done = max((t for text, t in arrived.items() if text.startswith(f"ack:{flood_cid} ")), default=started)
        return latencies, (flood_done - started) if flood else 0.0
    finally:
        worker.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flood", type=int, default=1000)
    ap.add_argument("--quiet", type=int, default=10)
    ap.add_argument("--every", type=float, default=0.5)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--model-ms", type=float, default=10.0)
    args = ap.parse_args()
    redis = start_redis()
    llm = FakeOpenAI(delay=args.model_ms / 1000).start()
    wa = FakeWhatsApp().start()
    lock = threading.Lock()
    try:
        with lock:
            alone, _ = run_phase(redis.url, llm, wa, args, flood=0, bounded=True)
            bounded, flood_b = run_phase(redis.url, llm, wa, args, flood=args.flood, bounded=True)
            unbounded, flood_u = run_phase(redis.url, llm, wa, args, flood=args.flood, bounded=False)
    finally:
        wa.stop()
        llm.stop()
        redis.stop()
    base50, base99 = statistics.median(alone), _percentile(alone, 0.99)
    print(f"quiet players: {args.quiet} conversations, a message each every {args.every} s for {args.seconds} s; "
          f"flood: {args.flood} inputs into one conversation; model {args.model_ms:.0f} ms; one worker slot")
    for name, xs in (("alone (baseline)", alone), ("beside a flood, bounded", bounded),
                     ("beside a flood, unbounded", unbounded)):
        p50, p99 = statistics.median(xs), _percentile(xs, 0.99)
        print(f"  {name:28s} p50 {p50 * 1000:8.0f} ms ({p50 / base50:6.1f}x)   p99 {p99 * 1000:8.0f} ms "
              f"({p99 / base99:6.1f}x)   n={len(xs)}")
    print(f"flood, first input to last reply: bounded {flood_b:.2f} s ({flood_b / args.flood * 1000:.2f} ms/input), "
          f"unbounded {flood_u:.2f} s ({flood_u / args.flood * 1000:.2f} ms/input); bounded/unbounded "
          f"{flood_b / flood_u:.2f}x")


if __name__ == "__main__":
    main()
