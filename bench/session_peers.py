"""Parley's turn path against session stores on the peers' own workload, in one run.

    python bench/session_peers.py [--conversations 200] [--turns 100] [--rounds 1]

The workload is the one session stores are measured on: many conversations, each turn appending a user and an
assistant message and reading the whole history back (a prompt needs all of it); one client, no LLM, histories
growing to ``2 x turns`` messages (compaction's trigger is kept but set too high to fire, so every turn still
pays the check). Three contenders against one real redis-server started on a free port:

- **floor**: a plain WATCH/GET/MULTI/SET/EXEC read-modify-write of a msgpack list (the safe minimum for a
  single-writer history without a queue);
- **agents**: ``agents.extensions.memory.RedisSession`` of the OpenAI Agents SDK (``get_items`` for the prompt,
  then ``add_items`` of the user and assistant items). It is not a dependency of Parley: install it into the
  bench's own environment (``pip install -r bench/requirements-peers.txt``); without it the row says so;
- **parley**: the producer's accept (``ConversationClient.send_message``), then the drain (lease and state in
  one script, the chat turn with an in-process model, the fenced commit of state, reply and trace) and the
  inline delivery to a channel that sends nowhere. Celery is left out: the peers have no queue.

Printed per contender: turns/s, client CPU per turn (this process's CPU time, every thread), and the median
cost of a turn in turns 1-10 against turns 91-100 (growth). Ratios are taken against the floor and the peer
of the same run. Rounds alternate the contenders so a noisy neighbour hits them alike.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgpack
import redis

from tests.support.redis_server import start_redis
from worker.client import ConversationClient
from worker.conversation.messages import Message
from worker.conversation.model import ModelRequest, ModelResponse, Usage
from worker.runtime import build_service
from worker.settings import Settings

WORDS = ["the", "theatre", "opens", "at", "seven", "and", "the", "gallery", "is", "round", "the", "corner", "from", "the", "gardens", "where", "the", "band", "plays", "on", "sundays", "so", "you", "could", "walk", "there", "after", "tea", "at", "the", "cafe"]


def user_text(cid: int, turn: int) -> str:
    """About 80 characters, different every turn."""
    return f"Turn {turn} of player {cid}: " + " ".join(WORDS[(turn + i) % len(WORDS)] for i in range(11)) + "?"


def assistant_text(turn: int) -> str:
    """About 200 characters."""
    return f"Answer {turn}: " + " ".join(WORDS[(turn * 3 + i) % len(WORDS)] for i in range(36)) + "."


@dataclass
class Run:
    """One contender's pass over the workload."""

    name: str
    seconds: float = 0.0
    cpu: float = 0.0
    turns: int = 0
    by_turn: dict[int, list[float]] = field(default_factory=dict)

    def rate(self) -> float:
        return self.turns / self.seconds

    def cpu_ms(self) -> float:
        return self.cpu / self.turns * 1e3

    def band(self, lo: int, hi: int) -> float:
        return statistics.median(x for t in range(lo, hi + 1) for x in self.by_turn.get(t, []))

    def growth(self, turns: int) -> float:
        return self.band(turns - 9, turns) / self.band(1, 10)


def drive(name: str, conversations: int, turns: int, one: Callable[[int, int], None]) -> Run:
    """Turn 1 of every conversation, then turn 2 of every conversation, ...: histories grow together, as a
    live fleet's do."""
    run = Run(name)
    wall, cpu = time.perf_counter(), time.process_time()
    for t in range(1, turns + 1):
        samples = run.by_turn.setdefault(t, [])
        for c in range(conversations):
            start = time.perf_counter()
            one(c, t)
            samples.append(time.perf_counter() - start)
    run.seconds, run.cpu = time.perf_counter() - wall, time.process_time() - cpu
    run.turns = conversations * turns
    return run


def floor(url: str, conversations: int, turns: int) -> Run:
    r = redis.Redis.from_url(url)
    prefix = f"floor:{uuid.uuid4().hex[:6]}:"

    def one(c: int, t: int) -> None:
        key = f"{prefix}{c}"
        with r.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(key)
                    blob = pipe.get(key)
                    history = msgpack.unpackb(blob) if blob else []
                    history.append({"role": "user", "content": user_text(c, t)})
                    history.append({"role": "assistant", "content": assistant_text(t)})
                    pipe.multi()
                    pipe.set(key, msgpack.packb(history))
                    pipe.execute()
                    return
                except redis.WatchError:
                    continue

    try:
        return drive("floor: WATCH/MULTI msgpack list", conversations, turns, one)
    finally:
        r.close()


def agents_session(url: str, conversations: int, turns: int) -> Run | None:
    try:
        from agents.extensions.memory import RedisSession
    except ImportError:
        return None
    loop = asyncio.new_event_loop()
    prefix = f"agents:{uuid.uuid4().hex[:6]}"
    import redis.asyncio as aredis

    client = aredis.Redis.from_url(url)
    sessions = [RedisSession(f"s{c}", redis_client=client, key_prefix=prefix) for c in range(conversations)]

    async def turn(c: int, t: int) -> None:
        session = sessions[c]
        await session.get_items()  # the whole history, for the prompt
        await session.add_items([{"role": "user", "content": user_text(c, t)},
                                 {"role": "assistant", "content": assistant_text(t)}])

    try:
        return drive("agents: RedisSession", conversations, turns, lambda c, t: loop.run_until_complete(turn(c, t)))
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()


class InstantModel:
    """An in-process model: answers at once with the turn's assistant text and a usage the size of the prompt."""

    provider = "openai"
    model_name = "gpt-4o-mini"
    reads_images = False

    def __init__(self) -> None:
        self.turn = 0

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.turn += 1
        text = assistant_text(self.turn)
        return ModelResponse(message=Message("assistant", text), usage=Usage(prompt_tokens=30 * len(request.messages),
                                                                          completion_tokens=len(text) // 4))


class NullChannel:
    """Sends nowhere (the delivery's store work is still done: claim, sent mark, outbox)."""

    def send_text(self, recipient: str, text: str, *, reply_to: str | None = None,
                  callback_data: str | None = None) -> str:
        return "wamid.null"


def parley(url: str, conversations: int, turns: int) -> Run:
    settings = Settings(redis_url=url, key_prefix=f"p{uuid.uuid4().hex[:6]}", llm_provider="openai",
                        openai_api_key="k", llm_model="gpt-4o-mini", compaction_summarize=False,
                        compaction_max_tokens=10_000_000,  # the check runs every turn; it never fires here
                        burst_quiet_seconds=0, whatsapp_messages_per_second=0, whatsapp_recipient_per_minute=0)

    def wake(*_: Any, **__: Any) -> None:
        return None

    svc = build_service(settings, wake, model=InstantModel(), channel=NullChannel())
    client = ConversationClient(svc.store, wake)
    ids = [f"44790{c:07d}" for c in range(conversations)]

    def one(c: int, t: int) -> None:
        cid = ids[c]
        client.send_message(cid, user_text(c, t), message_id=f"m{c}-{t}")
        if svc.drain(cid) != 1:
            raise RuntimeError(f"turn {t} of {cid} was not applied")

    run = drive("parley: accept + drain + delivery", conversations, turns, one)
    state = svc.store.read_state(ids[0])
    n = len(svc.chat.load(state.blob).state.messages)
    if n != 2 * turns:
        raise RuntimeError(f"a history holds {n} messages, expected {2 * turns}: compaction fired?")
    return run


def report(runs: list[Run], turns: int) -> None:
    print(f"{'contender':40s} {'turns/s':>9s} {'CPU ms/turn':>12s} {'p50 t1-10':>10s} {'p50 last 10':>12s} "
          f"{'growth':>7s}")
    for r in runs:
        print(f"{r.name:40s} {r.rate():9.0f} {r.cpu_ms():12.3f} {r.band(1, 10) * 1e3:8.3f}ms "
              f"{r.band(turns - 9, turns) * 1e3:10.3f}ms {r.growth(turns):6.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--conversations", type=int, default=200)
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    server = start_redis()
    try:
        ratios: list[tuple[float, float | None]] = []
        for i in range(args.rounds):
            print(f"== round {i + 1}: {args.conversations} conversations x {args.turns} turns")
            fl = floor(server.url, args.conversations, args.turns)
            peer = agents_session(server.url, args.conversations, args.turns)
            ours = parley(server.url, args.conversations, args.turns)
            report([r for r in (fl, peer, ours) if r is not None], args.turns)
            if peer is None:
                print("agents: not installed here (pip install -r bench/requirements-peers.txt); no peer ratio")
            vs_peer = ours.rate() / peer.rate() if peer else None
            ratios.append((ours.rate() / fl.rate(), vs_peer))
            print(f"parley / floor {ours.rate() / fl.rate():.2f}x (target >= 0.7)"
                  + (f"; parley / RedisSession {vs_peer:.2f}x (target >= 2)" if vs_peer else "")
                  + f"; parley growth {ours.growth(args.turns):.2f}x (target <= 1.2); "
                    f"client CPU {ours.cpu_ms():.3f} ms/turn (target <= 1)")
            server.client().flushall()
        if args.rounds > 1:
            print("medians over rounds: parley / floor "
                  f"{statistics.median(a for a, _ in ratios):.2f}x"
                  + (f", parley / RedisSession {statistics.median(b for _, b in ratios if b):.2f}x"
                     if all(b for _, b in ratios) else ""))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
