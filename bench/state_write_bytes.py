"""What a turn writes to Redis as a conversation grows: a turn appends what it adds (issue 33).

    python bench/state_write_bytes.py [--turns 1000] [--text varied|repetitive]

One conversation of ``--turns`` turns (a player's message, the model's answer; the texts of
``session_peers.py``), through the worker's own path (the producer's accept, the drain, the fenced commit, the inline
delivery) against a real redis-server with the append-only file on, three times in one run:

- **whole writes (before issue 33)**: every turn's state encoded whole and set (compressed past 4 KB), as every
  turn did before; the same base format, so the same bytes as then plus the base's four-byte length;
- **appends (now)**: a turn appends its frame (its new messages, counters, usage, metadata) to the stored blob;
- **RedisSession** of the OpenAI Agents SDK, when installed (``pip install -r bench/requirements-peers.txt``): its
  ``add_items`` of the same two messages (its ``get_items`` writes nothing).

Printed at turns 1, 10, 100 and ``--turns``: the state bytes the commit sent (its blob argument), the bytes the turn
added to the append-only file (what replicas and the disk receive: ``aof_current_size``), the bytes the client sent
(``total_net_input_bytes``) and the turn's new messages as the state encodes them; then the mean and the
largest over every turn (since format 5 a turn now and then folds the loose frames into a compressed run: its write
is one run, at most about 4 KB whatever the history's length, and the mean is what the flat cost is). Target: a turn's writes within 2x
of its new messages plus a fixed overhead, the overhead being what turn 1 wrote beyond twice its messages.
Compaction is off (its trigger set too high to fire), so every write after the first is a turn's own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgpack
import redis
import session_peers
from session_peers import InstantModel, NullChannel, assistant_text, user_text

from tests.support.redis_server import start_redis
from worker.client import ConversationClient
from worker.conversation import bounded
from worker.conversation.messages import Message
from worker.conversation.state import encode_with_memo
from worker.conversation.state_encode import encode_message
from worker.runtime import build_service
from worker.settings import Settings

PLAYER = 7


@dataclass
class Turn:
    state: int = 0  # the commit's blob argument
    aof: int = 0
    sent: int = 0
    new: int = 0  # the turn's new messages, encoded as the state holds them


@dataclass
class Pass:
    name: str
    turns: dict[int, Turn] = field(default_factory=dict)


def _counters(r: redis.Redis) -> tuple[int, int]:
    return int(r.info("persistence")["aof_current_size"]), int(r.info("stats")["total_net_input_bytes"])


def _measure(name: str, r: redis.Redis, turns: int, one: Callable[[int], int]) -> Pass:
    """``one(t)`` runs turn ``t`` and answers the state bytes its commit sent."""
    out = Pass(name)
    for t in range(1, turns + 1):
        aof, sent = _counters(r)
        state = one(t)
        aof2, sent2 = _counters(r)
        new = sum(len(msgpack.packb(encode_message(m.with_seq(2 * t - 1 + i)), use_bin_type=True))
                  for i, m in enumerate((Message("user", user_text(PLAYER, t)),
                                         Message("assistant", assistant_text(t, PLAYER)))))
        out.turns[t] = Turn(state, aof2 - aof, sent2 - sent, new)
    return out


@contextlib.contextmanager
def whole_writes() -> Iterator[None]:
    """Every state written whole, as before issue 33 (the encoder is told nothing of the stored blob)."""
    real = bounded.encode_with_memo
    bounded.encode_with_memo = lambda state, memo=None, **kw: encode_with_memo(state, **kw)  # type: ignore[assignment]
    try:
        yield
    finally:
        bounded.encode_with_memo = real  # type: ignore[assignment]


def parley(url: str, turns: int, name: str) -> Pass:
    settings = Settings(redis_url=url, key_prefix=f"w{uuid.uuid4().hex[:6]}", llm_provider="openai",
                        openai_api_key="k", llm_model="gpt-4o-mini", compaction_summarize=False,
                        compaction_max_tokens=100_000_000, burst_quiet_seconds=0,
                        whatsapp_messages_per_second=0, whatsapp_recipient_per_minute=0)

    def wake(*_: Any, **__: Any) -> None:
        return None

    svc = build_service(settings, wake, model=InstantModel(), channel=NullChannel())
    client = ConversationClient(svc.store, wake)
    cid = f"44791{PLAYER:07d}"
    scripts: Any = svc.store._scripts  # type: ignore[attr-defined]
    real_commit = scripts.commit
    written: list[int] = []

    def commit(**kw: Any) -> Any:
        written.append(len(kw["blob"]))
        return real_commit(**kw)

    scripts.commit = commit

    def one(t: int) -> int:
        written.clear()
        client.send_message(cid, user_text(PLAYER, t), message_id=f"m{t}")
        if svc.drain(cid) != 1:
            raise RuntimeError(f"turn {t} was not applied")
        return sum(written)

    r = redis.Redis.from_url(url)
    try:
        return _measure(name, r, turns, one)
    finally:
        r.close()


def agents_session(url: str, turns: int) -> Pass | None:
    try:
        from agents.extensions.memory import RedisSession
    except ImportError:
        return None
    import redis.asyncio as aredis

    loop = asyncio.new_event_loop()
    client = aredis.Redis.from_url(url)
    session = RedisSession("s", redis_client=client, key_prefix=f"agents:{uuid.uuid4().hex[:6]}")

    async def turn(t: int) -> None:
        await session.get_items()
        await session.add_items([{"role": "user", "content": user_text(PLAYER, t)},
                                 {"role": "assistant", "content": assistant_text(t, PLAYER)}])

    def one(t: int) -> int:
        loop.run_until_complete(turn(t))
        return 0

    r = redis.Redis.from_url(url)
    try:
        return _measure("agents: RedisSession", r, turns, one)
    finally:
        r.close()
        loop.run_until_complete(client.aclose())
        loop.close()


def report(passes: list[Pass], marks: list[int]) -> None:
    print(f"{'':36s} {'turn':>5s} {'state B':>8s} {'AOF B':>8s} {'sent B':>8s} {'new msgs B':>10s} "
          f"{'AOF / (2 new + fixed)':>22s}")
    for p in passes:
        first = p.turns[1]
        fixed = first.aof - 2 * first.new  # what turn 1 wrote beyond twice its messages
        for t in marks:
            x = p.turns[t]
            bound = 2 * x.new + fixed
            print(f"{p.name:36s} {t:5d} {x.state:8d} {x.aof:8d} {x.sent:8d} {x.new:10d} "
                  f"{x.aof / bound:21.2f}x{'' if x.aof <= bound else '  over'}")
        every = list(p.turns.values())
        mean = Turn(*(round(sum(getattr(x, f) for x in every) / len(every)) for f in ("state", "aof", "sent", "new")))
        bound = 2 * mean.new + fixed
        print(f"{p.name:36s} {'mean':>5s} {mean.state:8d} {mean.aof:8d} {mean.sent:8d} {mean.new:10d} "
              f"{mean.aof / bound:21.2f}x{'' if mean.aof <= bound else '  over'}")
        print(f"{p.name:36s} {'max':>5s} {max(x.state for x in every):8d} {max(x.aof for x in every):8d} "
              f"{max(x.sent for x in every):8d} {max(x.new for x in every):10d}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=1000)
    ap.add_argument("--text", choices=["varied", "repetitive"], default="varied")
    args = ap.parse_args()
    session_peers.TEXT = args.text
    server = start_redis(appendonly=True)
    try:
        with whole_writes():
            before = parley(server.url, args.turns, "parley, whole writes (before 33)")
        now = parley(server.url, args.turns, "parley, appends (now)")
        peer = agents_session(server.url, args.turns)
        marks = sorted({t for t in (1, 10, 100, args.turns) if t <= args.turns})
        print(f"== one conversation, {args.turns} turns, {args.text} text, append-only file on")
        report([p for p in (before, now, peer) if p is not None], marks)
        if peer is None:
            print("agents: not installed here (pip install -r bench/requirements-peers.txt)")
        last = args.turns
        print(f"turn {last}: AOF bytes now / before {now.turns[last].aof / before.turns[last].aof:.3f}; "
              f"state bytes now / before {now.turns[last].state / before.turns[last].state:.3f}"
              + (f"; AOF bytes now / RedisSession {now.turns[last].aof / peer.turns[last].aof:.2f}" if peer else ""))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
