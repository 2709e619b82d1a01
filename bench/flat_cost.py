"""Flat cost and token efficiency of the conversation core (no Redis, no Celery).

1. Work per turn at turn 10 and turn 1,000 of one conversation, with compaction and without: state size,
   decode+encode time, prompt tokens. Target (with compaction): turn 1,000 at most 1.2x turn 10.
2. A 300-turn scripted game (events, pinned facts, tool calls): prompt tokens per turn against the budget,
   total prompt tokens against the uncompacted run (target at most 35%), and every pinned fact still in the
   prompt at the end.

    python bench/flat_cost.py
"""

from __future__ import annotations

import json
import statistics
import time

from worker import Chat, Compose, CompressToolExchanges, ScriptedModel, Summarize, TokenBudget, Tool
from worker.conversation import ModelRequest, Reply
from worker.conversation.state import decode_state, encode_state
from worker.conversation.tokens import TiktokenCounter

COUNTER = TiktokenCounter(encoding="o200k_base")
BUDGET = 3000
PLACES = ["Harrogate Theatre", "Bettys Café", "Valley Gardens", "Royal Pump Room", "Mercer Gallery",
          "Montpellier Quarter", "The Stray", "Turkish Baths", "Crown Hotel", "Old Swan Hotel"]


def prompt_tokens(req: ModelRequest) -> int:
    return COUNTER.count_text(req.system or "") + COUNTER.count_messages(req.messages)


def game(turns: int, compaction: bool, pin_until: int | None = None) -> tuple[list[int], list[float], list[int], str, set[str]]:
    """Play the game; returns prompt tokens per chat request, per-turn core seconds, state sizes, the last
    preamble+history text, and the pinned facts."""
    requests: list[ModelRequest] = []

    def respond(req: ModelRequest) -> Reply | str:
        requests.append(req)
        last = req.messages[-1]
        if req.purpose == "summarize":
            return "The team is Owls. Places tagged so far were discussed; the user likes history and cake."
        if last.role == "user" and "look up" in last.content:
            return Reply(tool_calls=(("lookup", {"place": last.content.split("look up ")[1]}),))
        return "Here is what I know: " + ("the place has a long history and a lovely view. " * 3)

    model = ScriptedModel(default=respond)
    summarizer = ScriptedModel(default=respond)
    lookup = Tool(name="lookup", description="Look a place up", parameters={"type": "object", "properties": {
        "place": {"type": "string"}}}, handler=lambda place: {"place": place, "history": "Built in 1900. " * 40})
    compactor = Compose(CompressToolExchanges(keep_recent=2), Summarize(summarizer, keep_last=4, batch=4,
                                                                        trigger_tokens=int(BUDGET * 0.8)),
                        TokenBudget(BUDGET)) if compaction else None
    chat = Chat(model=model, tools=[lookup], compactor=compactor, counter=COUNTER)
    state: bytes | None = None
    pinned: set[str] = set()
    core: list[float] = []
    sizes: list[int] = []
    system = "You are the guide of a treasure hunt in Harrogate. Be brief."
    for t in range(turns):
        if t % 10 == 0 and (pin_until is None or t < pin_until):
            fact = f"Fact {t}: the team found clue {t} at {PLACES[t // 10 % len(PLACES)]}."
            state = chat.append_to_state(state, fact, pinned=True)
            pinned.add(fact)
        elif t % 3 == 0:
            state = chat.append_to_state(state, f"User has just tagged {PLACES[t % len(PLACES)]}")
        text = f"look up {PLACES[t % len(PLACES)]}" if t % 4 == 0 else f"What should we do next? ({t})"
        started = time.perf_counter()
        _, state = chat.chat_with_state(state, system=system, user=text)
        core.append(time.perf_counter() - started)
        sizes.append(len(state))
    chat_requests = [r for r in requests if r.purpose == "chat"]
    final = chat_requests[-1]
    visible = (final.system or "") + " ".join(m.content for m in final.messages)
    return [prompt_tokens(r) for r in chat_requests], core, sizes, visible, pinned


def codec_cost(blob: bytes, repeat: int = 200) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        encode_state(decode_state(blob))
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    import logging

    logging.basicConfig(level=logging.ERROR)
    print("1) work per turn (one conversation; events every 3rd turn, tool calls every 4th, a pinned fact at turn 0)")
    for compaction in (True, False):
        turns = 1000
        tokens, core, sizes, _, _ = game(turns, compaction, pin_until=10)
        # prompt tokens of the chat request that answered turn N (first request of that turn)
        per_turn = tokens  # includes tool rounds; compare windows of turns around 10 and 1000
        early, late = statistics.median(per_turn[8:14]), statistics.median(per_turn[-6:])
        early_t, late_t = statistics.median(core[8:14]), statistics.median(core[-6:])
        print(f"   compaction {'on ' if compaction else 'off'}: state bytes turn10={sizes[9]} turn1000={sizes[-1]} "
              f"({sizes[-1] / sizes[9]:.2f}x); prompt tokens {early:.0f} -> {late:.0f} ({late / early:.2f}x); "
              f"core time {early_t * 1e3:.2f} ms -> {late_t * 1e3:.2f} ms ({late_t / early_t:.2f}x)"
              + ("   target <= 1.2x" if compaction else ""))
    print("2) 300-turn game (a pinned fact every 10 turns): tokens")
    on, _, _, visible, pinned = game(300, True)
    off, _, _, _, _ = game(300, False)
    over = sum(1 for t in on if t > BUDGET)
    missing = [p for p in pinned if p not in visible]
    print(f"   budget {BUDGET}: max prompt {max(on)}, requests over budget {over}/{len(on)}")
    print(f"   total prompt tokens: compacted {sum(on)} vs uncompacted {sum(off)} = {sum(on) / sum(off):.1%} "
          f"(target <= 35%)")
    print(f"   pinned facts in the final prompt: {len(pinned) - len(missing)}/{len(pinned)}"
          + (f" missing: {json.dumps(missing[:3])}" if missing else ""))


if __name__ == "__main__":
    main()
