"""What the live game context costs a turn: a turn with the manifest's ``context`` entry against the same turn
without, in one run.

    python bench/context_cost.py [--turns 600] [--rounds 3]

One process, no Celery (as ``turn_phases.py``): a real redis-server, the light loopback model (answering at once)
and WhatsApp (``loopback_peers.py``) in a process of their own, and a loopback game context server in another
(``tests/support/game_context.py``; it answers ``{"system": "Player is 120 m from the target..."}`` at once). Two
services built from settings alone, the same but for ``PARLEY_TOOLS_FILE`` naming the context endpoint; their turns
alternate one by one (fifty conversations each), so the machine's load falls on both alike. Measured per turn:
``service.drain`` with its inline delivery (accept not included), wall time and this process's CPU (the CPU is
what the machine's load moves least: a wall-time hop to another process waits for a core). Also the fetch alone
(``LiveContext.for_turn``: the POST, the answer's checks and keeping it in Redis under the lease) and a raw
kept-alive ``httpx`` POST to the same endpoint.
Medians after a warm-up, per round, then the median over the rounds.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
from worker_bench import Peers

from tests.support.redis_server import start_redis
from worker.client import ConversationClient
from worker.runtime import build_service
from worker.service.drain.hooks import GameContextHook
from worker.settings import Settings

CONTEXT = "Player is 120 m from the target (Harrogate Theatre), heading north-east; 3 of 5 targets tagged."
WARM = 100


def _serve(url_out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    from tests.support.game_context import GameContextServer

    server = GameContextServer().start()
    server.default = CONTEXT
    url_out.put(server.endpoint)
    while True:
        time.sleep(3600)


def _one_turn(svc: Any, client: ConversationClient, tag: str, i: int, into: list[float],
              cpu: list[float] | None = None) -> None:
    cid = f"4478{tag}{i % 50:07d}"
    client.send_message(cid, f"question {i}", message_id=f"{tag}-{uuid.uuid4().hex}")
    start, cpu_start = time.perf_counter(), time.process_time()
    svc.drain(cid)
    into.append(time.perf_counter() - start)
    if cpu is not None:
        cpu.append(time.process_time() - cpu_start)


def _turns(svc: Any, client: ConversationClient, tag: str, n: int, into: list[float]) -> None:
    for i in range(n):
        _one_turn(svc, client, tag, i, into)


def one_round(redis_url: str, peers: Peers, endpoint: str, turns: int) -> dict[str, float]:
    manifest = Path(tempfile.mkdtemp()) / "tools.json"
    manifest.write_text(json.dumps({"context": {"url": endpoint, "timeout": 2}}))
    common: dict[str, Any] = dict(
        redis_url=redis_url, key_prefix=f"b{uuid.uuid4().hex[:6]}", llm_provider="openai", openai_api_key="k",
        openai_base_url=peers.llm_url, whatsapp_api_base_url=peers.wa_url, whatsapp_phone_number_id="1",
        whatsapp_access_token="t", compaction_summarize=False, burst_quiet_seconds=0,
        whatsapp_messages_per_second=0, whatsapp_recipient_per_minute=0, _env_file=None)
    without = build_service(Settings(**common), lambda *a, **k: None)
    with_context = build_service(Settings(**common, tools_file=str(manifest)), lambda *a, **k: None)
    client = ConversationClient(without.store, lambda cid: None)
    times: dict[str, list[float]] = {"without": [], "with": [], "in_turn": [], "cpu_without": [], "cpu_with": []}
    [hook] = [h for h in with_context.drainer.hooks.all if isinstance(h, GameContextHook)]
    for_turn = hook.live.for_turn

    def timed_fetch(cid: str, input_id: str, token: int) -> str | None:
        start = time.perf_counter()
        try:
            return for_turn(cid, input_id, token)
        finally:
            times["in_turn"].append(time.perf_counter() - start)

    hook.live.for_turn = timed_fetch  # type: ignore[method-assign]
    _turns(without, client, "0", WARM, [])
    _turns(with_context, client, "1", WARM, [])
    times["in_turn"].clear()
    for i in range(turns):  # turn by turn, the order alternating: the machine's load falls on both alike
        sides = [(without, "0", "without"), (with_context, "1", "with")]
        for svc, tag, side in sides if i % 2 else reversed(sides):
            _one_turn(svc, client, tag, i, times[side], times[f"cpu_{side}"])
    hook.live.for_turn = for_turn  # type: ignore[method-assign]
    fetch: list[float] = []
    client.send_message("447899999999", "held", message_id=f"held-{uuid.uuid4().hex}")
    token = with_context.store.begin("447899999999", 600_000).token  # a lease, so the last good context is kept
    for i in range(turns):
        start = time.perf_counter()
        assert hook.live.for_turn("447899999999", f"f{i}", token) == CONTEXT
        fetch.append(time.perf_counter() - start)
    raw_client, raw = httpx.Client(), []
    for i in range(turns):
        start = time.perf_counter()
        raw_client.post(endpoint, json={"conversation_id": "c", "input_id": f"r{i}"}).json()
        raw.append(time.perf_counter() - start)
    return {"without": statistics.median(times["without"]), "with": statistics.median(times["with"]),
            "in_turn": statistics.median(times["in_turn"]), "fetch": statistics.median(fetch),
            "raw": statistics.median(raw), "cpu_without": statistics.mean(times["cpu_without"]),
            "cpu_with": statistics.mean(times["cpu_with"])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    q: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    server = multiprocessing.Process(target=_serve, args=(q,), daemon=True)
    server.start()
    endpoint = q.get(timeout=30)
    redis, peers = start_redis(), Peers(delay=0.0)
    try:
        rounds = [one_round(redis.url, peers, endpoint, args.turns) for _ in range(args.rounds)]
    finally:
        peers.stop()
        redis.stop()
        server.terminate()
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    ratio = statistics.median(r["with"] / r["without"] for r in rounds)
    print(f"turns per side per round: {args.turns}, rounds: {args.rounds} (medians of each round's p50)")
    for r in rounds:
        print("  round: " + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in r.items()))
    print(f"turn without context (drain + inline delivery)  p50 {med['without'] * 1e3:7.3f} ms")
    print(f"turn with context                               p50 {med['with'] * 1e3:7.3f} ms")
    per_round = ", ".join(f"{r['with'] / r['without']:.2f}" for r in rounds)
    print(f"  difference {(med['with'] - med['without']) * 1e3:+.3f} ms   ratio {ratio:.2f}x (median of the rounds' "
          f"ratios; per round {per_round})")
    print(f"CPU of this process per turn (mean), without / with: {med['cpu_without'] * 1e3:.3f} / "
          f"{med['cpu_with'] * 1e3:.3f} ms, ratio {med['cpu_with'] / med['cpu_without']:.2f}x")
    print(f"the fetch inside those turns                    p50 {med['in_turn'] * 1e3:7.3f} ms")
    print(f"fetch alone (POST, checks, kept in Redis)       p50 {med['fetch'] * 1e3:7.3f} ms")
    print(f"floor: raw kept-alive httpx POST to the endpoint p50 {med['raw'] * 1e3:7.3f} ms")


if __name__ == "__main__":
    main()
