"""Where the time of one chat turn goes, phase by phase, in one process (no Celery), against a raw httpx POST.

    python bench/turn_phases.py [--turns 600]

A real redis-server and the light loopback model and WhatsApp (``loopback_peers.py``) in their own process.
Each phase is timed around the call that does it; the figures are medians after a warm-up. The raw httpx POST
to the same loopback model is the floor for the model call; a Redis PING is the floor for a round trip.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
from worker_bench import Peers

from tests.support.redis_server import start_redis
from worker.client import ConversationClient
from worker.runtime import build_service
from worker.settings import Settings

Timings = dict[str, list[float]]


def timed(obj: Any, name: str, label: str, into: Timings) -> None:
    fn: Callable[..., Any] = getattr(obj, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            into.setdefault(label, []).append(time.perf_counter() - t)

    setattr(obj, name, wrapper)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=600)
    args = ap.parse_args()
    server, peers = start_redis(), Peers(delay=0.0)
    try:
        s = Settings(redis_url=server.url, key_prefix=f"b{uuid.uuid4().hex[:6]}", llm_provider="openai",
                     openai_api_key="k", openai_base_url=peers.llm_url, whatsapp_api_base_url=peers.wa_url,
                     whatsapp_phone_number_id="1", whatsapp_access_token="t", compaction_summarize=False,
                     # One turn per message, and no platform pace (the loopback WhatsApp has no limits; pacer.py
                     # measures the pace): this measures a turn, not a player's pauses or Meta's 80 messages/s.
                     burst_quiet_seconds=0, whatsapp_messages_per_second=0, whatsapp_recipient_per_minute=0)
        svc = build_service(s, lambda *a, **k: None)
        client = ConversationClient(svc.store, lambda cid: None)
        t: Timings = {}
        timed(client, "send_message", "accept (producer, one pipelined round trip)", t)
        timed(svc.store, "begin", "begin (lease, head, state: one script)", t)
        timed(svc.chat.model, "complete", "model call (provider code + HTTP)", t)
        timed(svc.chat, "run_turn", "run_turn (core + model call)", t)
        timed(svc.store, "commit", "commit (state, reply, trace: one script)", t)
        timed(svc.channel, "send_text", "WhatsApp send (HTTP)", t)
        timed(svc.deliverer, "deliver", "deliver (send + sent mark; claim in commit)", t)
        for i in range(args.turns):
            cid = f"4479{i % 50:08d}"  # fifty conversations with growing, short histories
            client.send_message(cid, f"question {i}", message_id=f"q{i}")
            start = time.perf_counter()
            svc.drain(cid)
            t.setdefault("drain + inline delivery", []).append(time.perf_counter() - start)
        # The floor sends the same body as the last model call: what the provider code adds is the difference.
        model: Any = svc.chat.model
        last: list[Any] = []
        complete = model.complete
        model.complete = lambda request: (last.append(request), complete(request))[1]
        client.send_message("447900000000", "one more", message_id="floor")
        svc.drain("447900000000")
        body = model.body(last[-1])
        raw = httpx.Client()
        for _ in range(300):
            start = time.perf_counter()
            raw.post(f"{peers.llm_url}/chat/completions", json=body)
            t.setdefault("floor: raw httpx POST to the model", []).append(time.perf_counter() - start)
        for _ in range(300):
            start = time.perf_counter()
            svc.store.ping()
            t.setdefault("floor: Redis PING", []).append(time.perf_counter() - start)
        total = statistics.median(t["drain + inline delivery"][100:])
        for label, xs in t.items():
            m = statistics.median(xs[100:] if len(xs) > 200 else xs)
            print(f"{label:46s} p50 {m * 1e3:6.3f} ms  ({m / total:.2f} of a drain)")
    finally:
        peers.stop()
        server.stop()


if __name__ == "__main__":
    main()
