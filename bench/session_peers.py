"""Parley's turn path against session stores on the peers' own workload, in one run.

    python bench/session_peers.py [--conversations 200] [--turns 100] [--rounds 1] [--text varied|repetitive]
                                  [--no-before]

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

- **parley, whole writes** (unless ``--no-before``): the same, every turn's state written whole as before issue 33
  (compressed and rewritten each turn; today only a compaction does that): the old figure, in the same run.

The text (``--text``): ``varied`` (the default since issue 33) draws words from a vocabulary of 20,000 made-up
words with Zipf's law's frequencies (the few common words common, most rare), as players' messages are;
``repetitive`` is the 31-word sentence the bench used before, which compresses far better than chat does. Both give
a turn's texts the same lengths (about 80 and 200 characters).

Printed per contender: turns/s, client CPU per turn (this process's CPU time, every thread), the median cost of a
turn in turns 1-10 against the last ten (growth), the bytes sent to Redis per turn (its ``total_net_input_bytes``)
and the memory one conversation takes in Redis at the end (``MEMORY USAGE`` of its keys, the median of a sample;
Parley's with every key: mailbox dedupe, trace, delivered list; and of that its history, the state alone). Ratios are taken against
the floor and the peer of the same run. Rounds alternate the contenders so a noisy neighbour hits them alike.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# PARLEY_BENCH_TREE: another checkout's code under this script (see parley_of_tree).
sys.path.insert(0, os.environ.get("PARLEY_BENCH_TREE") or str(Path(__file__).resolve().parents[1]))

import msgpack
import redis
from player_texts import varied

from tests.support.redis_server import start_redis
from worker.client import ConversationClient
from worker.conversation.messages import Message
from worker.conversation.model import ModelRequest, ModelResponse, Usage
from worker.runtime import build_service
from worker.settings import Settings

WORDS = ["the", "theatre", "opens", "at", "seven", "and", "the", "gallery", "is", "round", "the", "corner", "from", "the", "gardens", "where", "the", "band", "plays", "on", "sundays", "so", "you", "could", "walk", "there", "after", "tea", "at", "the", "cafe"]
TEXT = "varied"  # set by --text


def _repetitive_user(cid: int, turn: int) -> str:
    return f"Turn {turn} of player {cid}: " + " ".join(WORDS[(turn + i) % len(WORDS)] for i in range(11)) + "?"


def _repetitive_assistant(turn: int) -> str:
    return f"Answer {turn}: " + " ".join(WORDS[(turn * 3 + i) % len(WORDS)] for i in range(36)) + "."


@functools.cache
def user_text(cid: int, turn: int) -> str:
    """About 80 characters, different every turn."""
    same = _repetitive_user(cid, turn)
    if TEXT == "repetitive":
        return same
    head = f"Turn {turn} of player {cid}: "
    return head + varied(random.Random(f"u{cid}:{turn}"), len(same) - len(head) - 1) + "?"


@functools.cache
def assistant_text(turn: int, cid: int = 0) -> str:
    """About 200 characters."""
    same = _repetitive_assistant(turn)
    if TEXT == "repetitive":
        return same
    head = f"Answer {turn}: "
    return head + varied(random.Random(f"a{cid}:{turn}"), len(same) - len(head) - 1) + "."


@dataclass
class Run:
    """One contender's pass over the workload."""

    name: str
    seconds: float = 0.0
    cpu: float = 0.0
    turns: int = 0
    by_turn: dict[int, list[float]] = field(default_factory=dict)
    sent_bytes: int = 0  # to Redis over the whole pass (total_net_input_bytes)
    memory: float = 0.0  # bytes one conversation takes in Redis at the end (median of a sample)
    history_memory: float = 0.0  # of which its history (Parley: the state; the peers keep only that)

    def rate(self) -> float:
        return self.turns / self.seconds

    def cpu_ms(self) -> float:
        return self.cpu / self.turns * 1e3

    def band(self, lo: int, hi: int) -> float:
        return statistics.median(x for t in range(lo, hi + 1) for x in self.by_turn.get(t, []))

    def growth(self, turns: int) -> float:
        return self.band(turns - 9, turns) / self.band(1, 10)


def _sent(r: redis.Redis) -> int:
    return int(r.info("stats")["total_net_input_bytes"])


def memory_of(r: redis.Redis, patterns: Callable[[int], list[str]], conversations: int) -> float:
    """The median over a sample of conversations of the memory (MEMORY USAGE) of every key ``patterns(c)`` names."""
    sample = range(0, conversations, max(1, conversations // 20))
    totals = []
    for c in sample:
        keys = {k for p in patterns(c) for k in r.scan_iter(match=p, count=1000)}
        totals.append(sum(int(r.memory_usage(k, samples=0) or 0) for k in keys))
    return statistics.median(totals)


def drive(name: str, conversations: int, turns: int, one: Callable[[int, int], None], r: redis.Redis) -> Run:
    """Turn 1 of every conversation, then turn 2 of every conversation, ...: histories grow together, as a
    live fleet's do."""
    for t in range(1, turns + 1):  # the texts are made before the clock starts (the same for every contender)
        for c in range(conversations):
            user_text(c, t), assistant_text(t, c)
    run = Run(name)
    sent = _sent(r)
    wall, cpu = time.perf_counter(), time.process_time()
    for t in range(1, turns + 1):
        samples = run.by_turn.setdefault(t, [])
        for c in range(conversations):
            start = time.perf_counter()
            one(c, t)
            samples.append(time.perf_counter() - start)
    run.seconds, run.cpu = time.perf_counter() - wall, time.process_time() - cpu
    run.turns = conversations * turns
    run.sent_bytes = _sent(r) - sent
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
                    history.append({"role": "assistant", "content": assistant_text(t, c)})
                    pipe.multi()
                    pipe.set(key, msgpack.packb(history))
                    pipe.execute()
                    return
                except redis.WatchError:
                    continue

    try:
        run = drive("floor: WATCH/MULTI msgpack list", conversations, turns, one, r)
        run.memory = run.history_memory = memory_of(r, lambda c: [f"{prefix}{c}"], conversations)
        return run
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
                                 {"role": "assistant", "content": assistant_text(t, c)}])

    r = redis.Redis.from_url(url)
    try:
        run = drive("agents: RedisSession", conversations, turns, lambda c, t: loop.run_until_complete(turn(c, t)), r)
        run.memory = memory_of(r, lambda c: [f"{prefix}:s{c}", f"{prefix}:s{c}:*"], conversations)
        run.history_memory = run.memory
        return run
    finally:
        r.close()
        loop.run_until_complete(client.aclose())
        loop.close()


_TURN = re.compile(r"Turn (\d+) of player (\d+):")


class InstantModel:
    """An in-process model: answers at once with the turn's assistant text (the one the peers store for that turn of
    that player) and a usage the size of the prompt."""

    provider = "openai"
    model_name = "gpt-4o-mini"
    reads_images = False

    def complete(self, request: ModelRequest) -> ModelResponse:
        asked = _TURN.match(request.messages[-1].content)
        text = assistant_text(int(asked[1]), int(asked[2])) if asked else assistant_text(0)
        return ModelResponse(message=Message("assistant", text), usage=Usage(prompt_tokens=30 * len(request.messages),
                                                                          completion_tokens=len(text) // 4))


class NullChannel:
    """Sends nowhere (the delivery's store work is still done: claim, sent mark, outbox)."""

    def send_text(self, recipient: str, text: str, *, reply_to: str | None = None,
                  callback_data: str | None = None) -> str:
        return "wamid.null"


def parley(url: str, conversations: int, turns: int, name: str = "parley: accept + drain + delivery") -> Run:
    prefix = f"p{uuid.uuid4().hex[:6]}"
    settings = Settings(redis_url=url, key_prefix=prefix, llm_provider="openai",
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

    r = redis.Redis.from_url(url)
    try:
        run = drive(name, conversations, turns, one, r)
        run.memory = memory_of(r, lambda c: [f"{prefix}:{{{ids[c]}}}:*"], conversations)
        run.history_memory = memory_of(r, lambda c: [f"{prefix}:{{{ids[c]}}}:state", f"{prefix}:{{{ids[c]}}}:blob"],
                                       conversations)
    finally:
        r.close()
    state = svc.store.read_state(ids[0])
    n = len(svc.chat.load(state.blob).state.messages)
    if n != 2 * turns:
        raise RuntimeError(f"a history holds {n} messages, expected {2 * turns}: compaction fired?")
    return run


def parley_of_tree(tree: str, url: str, conversations: int, turns: int) -> Run:
    """:func:`parley` as the checkout ``tree`` has it (an older commit, exported), run by this script in a process
    of its own against the same server: old against new in one run."""
    env = {**os.environ, "PARLEY_BENCH_TREE": tree}
    out = subprocess.run([sys.executable, __file__, "--only-parley", url, "--text", TEXT, "--conversations",
                          str(conversations), "--turns", str(turns)], env=env, check=True, capture_output=True,
                         text=True).stdout
    fields = json.loads(out.strip().splitlines()[-1])
    fields["by_turn"] = {int(k): v for k, v in fields["by_turn"].items()}
    return Run(**fields)


def report(runs: list[Run], turns: int) -> None:
    print(f"{'contender':44s} {'turns/s':>8s} {'CPU ms/turn':>11s} {'p50 t1-10':>10s} {'p50 last 10':>11s} "
          f"{'growth':>7s} {'B to Redis/turn':>15s} {'KB/conversation':>15s} {'KB of history':>13s}")
    for r in runs:
        print(f"{r.name:44s} {r.rate():8.0f} {r.cpu_ms():11.3f} {r.band(1, 10) * 1e3:8.3f}ms "
              f"{r.band(turns - 9, turns) * 1e3:9.3f}ms {r.growth(turns):6.2f}x {r.sent_bytes / r.turns:15.0f} "
              f"{r.memory / 1024:15.1f} {r.history_memory / 1024:13.1f}")


def main() -> None:
    global TEXT
    ap = argparse.ArgumentParser()
    ap.add_argument("--conversations", type=int, default=200)
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--text", choices=["varied", "repetitive"], default="varied")
    ap.add_argument("--before", metavar="TREE", help="also run Parley as this checkout has it (e.g. an export of the "
                    "commit before issue 33: git archive <commit> | tar -x -C TREE)")
    ap.add_argument("--only-parley", metavar="URL", help=argparse.SUPPRESS)  # parley_of_tree's child
    args = ap.parse_args()
    TEXT = args.text
    if args.only_parley:
        run = parley(args.only_parley, args.conversations, args.turns, name="parley before (--before tree)")
        print(json.dumps(vars(run)))
        return
    server = start_redis()
    try:
        ratios: list[tuple[float, float | None]] = []
        for i in range(args.rounds):
            print(f"== round {i + 1}: {args.conversations} conversations x {args.turns} turns, {TEXT} text")
            fl = floor(server.url, args.conversations, args.turns)
            peer = agents_session(server.url, args.conversations, args.turns)
            old = parley_of_tree(args.before, server.url, args.conversations, args.turns) if args.before else None
            ours = parley(server.url, args.conversations, args.turns)
            report([r for r in (fl, peer, old, ours) if r is not None], args.turns)
            if peer is None:
                print("agents: not installed here (pip install -r bench/requirements-peers.txt); no peer ratio")
            vs_peer = ours.rate() / peer.rate() if peer else None
            ratios.append((ours.rate() / fl.rate(), vs_peer))
            print(f"parley / floor {ours.rate() / fl.rate():.2f}x (target >= 0.7)"
                  + (f"; parley / RedisSession {vs_peer:.2f}x (target >= 2)" if vs_peer else "")
                  + f"; parley growth {ours.growth(args.turns):.2f}x (target <= 1.2); "
                    f"client CPU {ours.cpu_ms():.3f} ms/turn (target <= 1)"
                  + (f"; memory per conversation {ours.memory / peer.memory:.2f}x RedisSession's (target <= 1; "
                     f"its history alone {ours.history_memory / peer.memory:.2f}x)" if peer else ""))
            if old is not None:
                print(f"before -> now: turns/s {old.rate():.0f} -> {ours.rate():.0f}, growth {old.growth(args.turns):.2f}x"
                      f" -> {ours.growth(args.turns):.2f}x, CPU {old.cpu_ms():.3f} -> {ours.cpu_ms():.3f} ms/turn, "
                      f"bytes to Redis per turn {old.sent_bytes / old.turns:.0f} -> {ours.sent_bytes / ours.turns:.0f},"
                      f" KB per conversation {old.memory / 1024:.1f} -> {ours.memory / 1024:.1f}")
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
