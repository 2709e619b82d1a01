"""Recall in the turn: what ``auto`` recall adds to a worker's turn, and a search through the Redis reader.

    python bench/recall_turn.py [--n 600] [--rounds 4] [--searches 300]

1. A turn with ``auto`` recall over 1,000 archived messages against the same turn without recall, in one run: the
   worker's service as ``build_service`` makes it (``PARLEY_RECALL=auto`` / ``off``), the OpenAI provider against
   the light loopback model and WhatsApp of bench/loopback_peers.py (their own process, answering at once), on a
   redis-server of its own; 20 conversations, each with
   1,000 archived messages of generated chat (bench/recall_chat.py) in the agreed layout (``recall``: codec
   batches, ``recall_index``: one merged segment of 900 messages and ten commits' segments of 10), each turn an
   accepted player's message (bench/player_texts.py) and ``service.drain``. The two services alternate round by
   round; CPU per drain (``time.process_time``), median of the rounds. The reader's cache is warm after each
   conversation's first turn, as it is in a worker that keeps serving the conversation.
2. Search at 10,000 archived messages through :class:`~worker.store.recall_reader.RedisArchiveReader`: cold (a
   new reader: LRANGE every segment and decode them) and warm (the segments cached: the list's length checked, no
   segment decoded), the whole ``search`` call (round trips, ranking, the hits' context within 800 tokens); the
   queries are the planted facts' questions and players' messages. p50 / p99 of the wall time and of the thread's
   CPU time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis
from player_texts import player_message
from worker_bench import Peers

from bench.recall_chat import conversation
from tests.support.redis_server import start_redis
from worker.client import ConversationClient
from worker.conversation.recall import ArchivedMessage, SearchIndex, encode_batch
from worker.runtime import build_service
from worker.settings import Settings
from worker.store.recall_reader import RedisArchiveReader
from worker.store.redis_store import ConversationStore

CONVERSATIONS = 20


def seed(store: ConversationStore, cid: str, messages: list[ArchivedMessage]) -> None:
    """The archive as the commits leave it: a merged segment, then one small segment per later commit."""
    keys = store.keys(cid)
    cut = len(messages) * 9 // 10
    parts = [messages[:cut]] + [messages[i:i + 10] for i in range(cut, len(messages), 10)]
    for part in parts:
        store.client.rpush(keys.recall, encode_batch(part))
        store.client.rpush(keys.recall_index, SearchIndex.of(part).to_bytes())


def turns(redis_url: str, peers: Peers, n: int, rounds: int) -> dict[str, float]:
    services = {}
    for label in ("off", "auto"):
        settings = Settings(redis_url=redis_url, key_prefix=f"b{uuid.uuid4().hex[:6]}", llm_provider="openai",
                            openai_api_key="k", openai_base_url=peers.llm_url, whatsapp_api_base_url=peers.wa_url,
                            whatsapp_phone_number_id="1", whatsapp_access_token="t", compaction_summarize=False,
                            burst_quiet_seconds=0, whatsapp_messages_per_second=0, whatsapp_recipient_per_minute=0,
                            recall=label)
        services[label] = build_service(settings, lambda *a, **k: None)
    for i in range(CONVERSATIONS):
        messages, _ = conversation(1000, seed=i, facts=20)
        seed(services["auto"].store, f"4477{i:06d}", messages)
    cpu: dict[str, list[float]] = {"off": [], "auto": []}
    asked = 0
    for r in range(rounds + 1):  # round 0 warms both up
        for label in (("off", "auto") if r % 2 else ("auto", "off")):
            svc = services[label]
            sender = ConversationClient(svc.store, lambda cid: None)
            spent = 0.0
            for i in range(n):
                cid = f"4477{(asked + i) % CONVERSATIONS:06d}"
                sender.send_message(cid, player_message(asked + i), message_id=f"wamid.{label}{r}.{i}")
                c0 = time.process_time()
                svc.drain(cid)
                spent += time.process_time() - c0
            if r:
                cpu[label].append(spent / n * 1e6)
        asked += n
    return {label: statistics.median(v) for label, v in cpu.items()}


def searches(client: redis.Redis, count: int) -> dict[str, dict[str, tuple[float, float]]]:
    """p50 / p99 in ms of each search's wall time and of this thread's CPU time (on a shared machine the wall time
    also holds the waits for a core)."""
    store = ConversationStore(client, prefix=f"s{uuid.uuid4().hex[:6]}")
    messages, facts = conversation(10_000, seed=7)
    seed(store, "4477999999", messages)
    queries = ([f.query for f in facts] + [player_message(f"q{i}") for i in range(count)])[:count]
    out: dict[str, dict[str, tuple[float, float]]] = {}
    warm = RedisArchiveReader(client, store.keys)
    warm.search("4477999999", "warm up", max_tokens=800)
    for label in ("cold", "warm"):
        wall, cpu = [], []
        for query in queries:
            reader = RedisArchiveReader(client, store.keys) if label == "cold" else warm
            t0, c0 = time.perf_counter(), time.thread_time()
            reader.search("4477999999", query, max_tokens=800)
            cpu.append((time.thread_time() - c0) * 1000)
            wall.append((time.perf_counter() - t0) * 1000)
        out[label] = {name: _p50_p99(xs) for name, xs in (("wall", wall), ("cpu", cpu))}
    return out


def _p50_p99(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs), xs[min(len(xs) - 1, int(len(xs) * 0.99))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--searches", type=int, default=300)
    parser.add_argument("--searches-only", action="store_true")
    args = parser.parse_args()
    server, peers = start_redis(), Peers(delay=0.0)
    try:
        client = redis.Redis(port=server.port)
        if not args.searches_only:
            cpu = turns(server.url, peers, args.n, args.rounds)
            print(f"turn CPU per drain, median of {args.rounds} rounds of {args.n}: without recall {cpu['off']:.0f} µs, "
                  f"auto recall at 1,000 archived {cpu['auto']:.0f} µs ({cpu['auto'] / cpu['off']:.2f}x; target 1.2x)")
        for label, figures in searches(client, args.searches).items():
            (w50, w99), (c50, c99) = figures["wall"], figures["cpu"]
            print(f"search at 10,000 through the Redis reader, {label}: wall p50 {w50:.2f} ms, p99 {w99:.2f} ms; "
                  f"CPU p50 {c50:.2f} ms, p99 {c99:.2f} ms (target p99 < 20 ms)")
    finally:
        peers.stop()
        server.stop()


if __name__ == "__main__":
    main()
