"""What traces cost a turn: the same turns with tracing on (exporting over OTLP/HTTP to a loopback receiver) against
off, in one run.

    python bench/trace_cost.py [--turns 600] [--rounds 3] [--block 50]

One process, no Celery (as ``context_cost.py``): a real redis-server, the light loopback model (answering at once)
and WhatsApp (``loopback_peers.py``) in a process of their own, and the test suite's OTLP/HTTP receiver
(``tests/support/otlp_receiver.py``, decoding every request with opentelemetry-proto) in another. Two services built
from the same settings, one while tracing is on (its drain has the turn-span hook) and one while it is off; the
process's tracing is switched between them block by block (``--block`` turns each, the order alternating), so the
machine's load falls on both alike. A turn is the producer's accept plus ``service.drain`` with its inline delivery;
each "on" block ends with a flush of the batch exporter, so the export's CPU is inside the block. Measured: wall time
per turn (p50) and this process's CPU per turn (the block's CPU over its turns, the exporter's thread included).
Tracing off is the facade's no-op path (what every deployment without an OTLP endpoint runs).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from worker_bench import Peers

from tests.support.redis_server import start_redis
from worker.client import ConversationClient
from worker.conversation import observe, tools
from worker.observability import tracing
from worker.runtime import build_service
from worker.settings import Settings

WARM = 100


def _serve(url_out: multiprocessing.Queue, stop: Any, count_out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    from tests.support.otlp_receiver import OtlpReceiver

    receiver = OtlpReceiver().start()
    url_out.put(receiver.url)
    stop.wait()
    count_out.put(len(receiver.spans))


class Switch:
    """This process's tracing, on or off: the facade's SDK and the core's model and tool call tracers."""

    def __init__(self) -> None:
        self.on_tracing = tracing._get()
        assert self.on_tracing is not None, "the otel extra is needed"
        self.model_calls, self.tool_calls = observe._tracer, tools._tracer

    def set(self, on: bool) -> None:
        tracing._tracing = self.on_tracing if on else None
        observe.trace_model_calls(self.model_calls if on else None)
        tools.trace_tool_calls(self.tool_calls if on else None)


def _block(svc: Any, client: ConversationClient, tag: str, start: int, n: int, walls: list[float]) -> float:
    """``n`` turns on ``svc``; returns the CPU this process spent on them."""
    cpu = time.process_time()
    for i in range(start, start + n):
        cid = f"4479{tag}{i % 50:07d}"
        t0 = time.perf_counter()
        client.send_message(cid, f"question {i}", message_id=f"{tag}-{uuid.uuid4().hex}")
        svc.drain(cid)
        walls.append(time.perf_counter() - t0)
    return time.process_time() - cpu


def one_round(redis_url: str, peers: Peers, switch: Switch, turns: int, block: int) -> dict[str, float]:
    common: dict[str, Any] = dict(
        redis_url=redis_url, key_prefix=f"b{uuid.uuid4().hex[:6]}", llm_provider="openai", openai_api_key="k",
        openai_base_url=peers.llm_url, whatsapp_api_base_url=peers.wa_url, whatsapp_phone_number_id="1",
        whatsapp_access_token="t", compaction_summarize=False, burst_quiet_seconds=0,
        whatsapp_messages_per_second=0, whatsapp_recipient_per_minute=0, _env_file=None)
    switch.set(True)
    traced = build_service(Settings(**common), lambda *a, **k: None)
    switch.set(False)
    plain = build_service(Settings(**common), lambda *a, **k: None)
    client = ConversationClient(plain.store, lambda cid: None)
    walls: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, float] = {True: 0.0, False: 0.0}
    for on in (True, False):
        switch.set(on)
        _block(traced if on else plain, client, "w", 0, WARM, [])
    tracing.flush()
    for b in range(0, turns, block):
        order = (True, False) if (b // block) % 2 else (False, True)
        for on in order:
            switch.set(on)
            started = time.process_time()
            _block(traced if on else plain, client, "1" if on else "0", b, block, walls[on])
            if on:
                tracing.flush()  # the export's CPU belongs to these turns
            cpu[on] += time.process_time() - started
    switch.set(True)
    n = len(walls[True])
    return {"off": statistics.median(walls[False]), "on": statistics.median(walls[True]),
            "cpu_off": cpu[False] / n, "cpu_on": cpu[True] / n}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--block", type=int, default=50)
    args = ap.parse_args()
    urls: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    counts: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    stop = multiprocessing.Event()
    server = multiprocessing.Process(target=_serve, args=(urls, stop, counts), daemon=True)
    server.start()
    os.environ.update({"OTEL_EXPORTER_OTLP_ENDPOINT": urls.get(timeout=30), "OTEL_SERVICE_NAME": "parley-bench"})
    os.environ.pop("OTEL_SDK_DISABLED", None)
    switch = Switch()
    redis, peers = start_redis(), Peers(delay=0.0)
    try:
        rounds = [one_round(redis.url, peers, switch, args.turns, args.block) for _ in range(args.rounds)]
    finally:
        peers.stop()
        redis.stop()
        stop.set()
    spans = counts.get(timeout=30)
    server.join(10)
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    wall_ratio = statistics.median(r["on"] / r["off"] for r in rounds)
    cpu_ratio = statistics.median(r["cpu_on"] / r["cpu_off"] for r in rounds)
    traced_turns = (args.turns + WARM) * args.rounds
    print(f"turns per side per round: {args.turns} in blocks of {args.block}, rounds: {args.rounds}")
    for r in rounds:
        print("  round: " + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in r.items()))
    print(f"turn, tracing off (accept + drain + inline delivery)  wall p50 {med['off'] * 1e3:7.3f} ms, "
          f"CPU {med['cpu_off'] * 1e3:.3f} ms")
    print(f"turn, tracing on (exported to a loopback receiver)    wall p50 {med['on'] * 1e3:7.3f} ms, "
          f"CPU {med['cpu_on'] * 1e3:.3f} ms")
    print(f"  on / off: wall {wall_ratio:.2f}x, CPU {cpu_ratio:.2f}x (medians of the rounds' ratios; per round "
          + ", ".join(f"{r['on'] / r['off']:.2f}/{r['cpu_on'] / r['cpu_off']:.2f}" for r in rounds) + ")")
    print(f"spans received: {spans} for {traced_turns} traced turns ({spans / traced_turns:.1f} per turn)")


if __name__ == "__main__":
    main()
