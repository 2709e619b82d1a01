"""What coalescing players' bursts saves, and what the quiet period costs.

A recorded-burst workload (seeded: the same messages and gaps every run): players of a GPS game, each sending a
few bursts of 2-4 messages within about a second ("wait" / "which way" / "the theatre?") and single messages,
with pauses between them while they read the answer and walk. It is replayed in real time against two
:class:`~worker.service.ConversationService` instances side by side, coalescing on (the default quiet period
1.5 s, maximum wait 8 s) and off (quiet 0), each over an in-memory Redis (fakeredis), a recording channel and a
scripted model that answers at once and reports usage estimated from the request's text (so prompt tokens grow
with the history). Wake-ups with a countdown (the end of a quiet period) run when due, as Celery's would.

Printed, per mode and as ratios (on / off): model calls, prompt and completion tokens per player message, and the
latency from the last message a turn took in to its reply being committed (median and p90; the model answers
at once here, so the figure with coalescing off is the service's own overhead and the difference is what the
quiet period adds).

    python bench/burst_cost.py [--players 40] [--seed 14]
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import logging
import random
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import fakeredis
import msgpack

from worker import Chat, ScriptedModel
from worker.client import ConversationClient
from worker.conversation.model import ModelRequest, Usage
from worker.conversation.scripted import Reply
from worker.service import ConversationService, ServiceConfig
from worker.settings import Burst, Delivery, Drain
from worker.store.redis_store import ConversationStore, StoreLimits
from worker.testing import RecordingChannel

SYSTEM = "You are the guide of a treasure hunt in Harrogate. Answer in two or three short sentences."
BURST_LINES = ["wait", "which way", "the theatre?", "we're at the fountain", "hang on", "is it left or right",
               "found a plaque!", "what does it say about 1900", "ok", "the clue says look up", "near the park?",
               "my team is lost lol", "hello??", "which street", "is it open now"]
SINGLE_LINES = ["What is the next clue?", "We found the statue, what now?", "How many points do we have?",
                "Can you give us a hint for the Royal Pump Room?", "Is Bettys Café part of the game?",
                "We are at Valley Gardens, where do we go next?"]
ANSWER = ("Head north along Parliament Street and keep the Stray on your right. The next clue is on the wall "
          "of the theatre, just past the stage door. ")


@dataclass
class Message:
    player: str
    at: float  # seconds from the start of the replay
    text: str
    mid: str
    last_of_burst: bool


def workload(players: int, seed: int) -> list[Message]:
    """Each player: 6 turns of play; 60% of them bursts of 2-4 messages 0.15-0.45 s apart (within ~1 s), the
    rest single messages; 3-9 s between them (reading the answer, walking)."""
    rng = random.Random(seed)
    out: list[Message] = []
    for p in range(players):
        cid = f"4477014{p:05d}"
        t = rng.uniform(0.0, 4.0)
        k = 0
        for _ in range(6):
            size = rng.randint(2, 4) if rng.random() < 0.6 else 1
            lines = rng.sample(BURST_LINES, size) if size > 1 else [rng.choice(SINGLE_LINES)]
            for i, line in enumerate(lines):
                if i:
                    t += rng.uniform(0.15, 0.45)
                out.append(Message(cid, t, f"{line} [{cid}:{k}]", f"wamid.{cid}.{k}", i == size - 1))
                k += 1
            t += rng.uniform(3.0, 9.0)
    return sorted(out, key=lambda m: m.at)


def estimate(text: str) -> int:
    return len(text) // 4 + 1


@dataclass
class Mode:
    """One service under test and what its model was asked."""

    name: str
    quiet: float
    schedule: Callable[[float, Callable[[], None]], None]
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    sent_at: dict[str, float] = field(default_factory=dict)
    service: ConversationService = field(init=False)
    client: ConversationClient = field(init=False)
    store: ConversationStore = field(init=False)

    def __post_init__(self) -> None:
        self.store = ConversationStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()),
                                       prefix=f"b{uuid.uuid4().hex[:6]}", limits=StoreLimits())
        chat = Chat(model=ScriptedModel(default=self.answer), auto_compact=False)
        config = ServiceConfig(system_prompt=SYSTEM, burst=Burst(quiet_seconds=self.quiet, max_wait_seconds=8.0),
                               drain=Drain(max_turns=0, max_seconds=0.0, dead_letter_reply=""),
                               delivery=Delivery(status_webhooks=False))
        entry = {"drain": lambda c: self.service.drain(c), "deliver": lambda c: self.service.deliver(c),
                 "compact": lambda c: self.service.queue_compaction(c)}

        def wake(kind: str, cid: str, *, countdown: float = 0.0) -> None:
            self.schedule(countdown, lambda: entry[kind](cid))

        self.service = ConversationService(self.store, chat, RecordingChannel(), wake, config)
        self.client = ConversationClient(self.store, lambda cid: self.schedule(0.0, lambda: self.service.drain(cid)))

    def answer(self, req: ModelRequest) -> Reply:
        """Usage as a provider would report it: the whole request's text in, the answer out."""
        text = ANSWER * (1 + self.calls % 2)
        prompt = estimate(req.system or "") + sum(estimate(m.content) + 4 for m in req.messages)
        self.calls += 1
        self.prompt_tokens += prompt
        self.completion_tokens += estimate(text)
        return Reply(text=text, usage=Usage(prompt_tokens=prompt, completion_tokens=estimate(text)))

    def send(self, m: Message) -> None:
        self.sent_at[m.mid] = time.time()
        self.client.send_message(m.player, m.text, message_id=m.mid, reply_to=m.mid)

    def latencies(self, players: list[str]) -> tuple[list[float], int]:
        """Per committed turn: its commit time minus the send time of the last message it took in; and the
        number of turns."""
        out = []
        for cid in players:
            for raw in self.store.trace(cid, 10_000):
                t = msgpack.unpackb(raw, raw=False)
                if "reply" not in t and "in_state" not in t:
                    continue
                last = (t.get("burst") or [t["id"]])[-1]
                out.append(t["at"] - self.sent_at[last])
        return out, len(out)


def replay(messages: list[Message], modes: list[Mode], queue: list[tuple[float, int, Callable[[], None]]]) -> None:
    """Run sends and due wake-ups in time order, in real time, on this thread (a drain here takes about a
    millisecond, far under the quiet period)."""
    start = time.monotonic()
    seq = itertools.count()
    for m in messages:
        for mode in modes:
            heapq.heappush(queue, (start + m.at, next(seq), lambda m=m, mode=mode: mode.send(m)))
    while queue:
        due, _, action = heapq.heappop(queue)
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        action()


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[int(q) - 1] if len(xs) > 1 else xs[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--players", type=int, default=40)
    ap.add_argument("--seed", type=int, default=14)
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    messages = workload(args.players, args.seed)
    queue: list[tuple[float, int, Callable[[], None]]] = []
    seq = itertools.count(1_000_000)

    def schedule(countdown: float, action: Callable[[], None]) -> None:
        heapq.heappush(queue, (time.monotonic() + countdown, next(seq), action))

    on, off = Mode("on", 1.5, schedule), Mode("off", 0.0, schedule)
    bursts = sum(1 for m in messages if m.last_of_burst)
    multi = sum(1 for i, m in enumerate(messages) if m.last_of_burst and not _single(messages, i))
    print(f"workload (seed {args.seed}): {args.players} players, {len(messages)} messages in {bursts} bursts "
          f"({multi} of 2-4 messages), {max(m.at for m in messages):.0f} s replayed in real time")
    started = time.monotonic()
    replay(messages, [on, off], queue)
    players = sorted({m.player for m in messages})
    n = len(messages)
    rows = []
    for mode in (on, off):
        lat, turns = mode.latencies(players)
        rows.append((mode, turns, statistics.median(lat), pct(lat, 90)))
    print(f"replayed in {time.monotonic() - started:.1f} s")
    print(f"{'':34}{'on (quiet 1.5 s)':>18}{'off':>12}{'on/off':>10}")
    (a, ta, ma, pa), (b, tb, mb, pb) = rows

    def line(label: str, x: float, y: float, fmt: str = "{:.2f}") -> None:
        print(f"{label:34}{fmt.format(x):>18}{fmt.format(y):>12}{x / y if y else float('nan'):>10.2f}")

    line("turns (replies)", ta, tb, "{:.0f}")
    line("model calls per player message", a.calls / n, b.calls / n)
    line("prompt tokens per player message", a.prompt_tokens / n, b.prompt_tokens / n, "{:.0f}")
    line("completion tokens per player message", a.completion_tokens / n, b.completion_tokens / n, "{:.1f}")
    line("total tokens per player message", (a.prompt_tokens + a.completion_tokens) / n,
         (b.prompt_tokens + b.completion_tokens) / n, "{:.0f}")
    line("latency to commit, median (s)", ma, mb, "{:.3f}")
    line("latency to commit, p90 (s)", pa, pb, "{:.3f}")
    print(f"the quiet period adds {ma - mb:.2f} s at the median and {pa - pb:.2f} s at p90 "
          f"(from the last message a turn took in to its reply committed; the model answers at once here)")


def _single(messages: list[Message], i: int) -> bool:
    """Whether message ``i`` (the last of its burst) is a burst of one: the player's previous message, if any,
    was the last of its own burst."""
    prev = [m for m in messages[:i] if m.player == messages[i].player]
    return not prev or prev[-1].last_of_burst


if __name__ == "__main__":
    main()
