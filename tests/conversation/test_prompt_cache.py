"""Prompts the providers' caches can reuse: the default compaction compacts rarely, in one large step, and what it
produces sits where it does not move between compactions (issue 33).

A game through the worker's flow (a turn, then the follow-up compaction spliced onto the state) with the default
chain built from settings: game events, pinned events, keyed facts that change, tool calls (one sets a fact).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.conversation.conftest import make_tool
from worker import Chat, Compose, CompressToolExchanges, Hysteresis, ScriptedModel, Summarize, TokenBudget
from worker.conversation import ModelRequest, Reply
from worker.conversation.compaction import COMPRESSED_MARK
from worker.conversation.prompt import CHANGED_FACTS_HEADING, DEFAULT_FACT_PLACEMENT, FactPlacement
from worker.conversation.state import decode_state
from worker.conversation.tokens import EstimateCounter
from worker.errors import RateLimitedError
from worker.runtime.compaction_chain import build_compactor
from worker.settings import Settings

HIGH, BUDGET = 800, 3000
COUNTER = EstimateCounter()
WORDS = [f"{a}{b}" for a in ("ka", "lo", "mi", "ru", "te", "vo", "zi") for b in ("ber", "dan", "fel", "gor", "nix")]


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


@dataclass
class Game:
    """What a game did, request by request."""

    requests: list[ModelRequest] = field(default_factory=list)
    compactions_before: list[int] = field(default_factory=list)  # compactions spliced before each request
    must_show: list[tuple[str, ...]] = field(default_factory=list)
    superseded: list[tuple[str, ...]] = field(default_factory=list)
    compactions: int = 0
    after_compaction: list[int] = field(default_factory=list)  # history tokens right after each compaction
    pinned: list[str] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)
    old_facts: list[str] = field(default_factory=list)
    current: list[dict[str, str]] = field(default_factory=list)  # the facts by key when each request was made


def play(turns: int = 60, seed: int = 3, facts_placement: FactPlacement = DEFAULT_FACT_PLACEMENT,
         **settings: Any) -> Game:
    rng = random.Random(seed)
    game = Game()

    def answer(request: ModelRequest) -> Reply | str:
        if request.purpose == "summarize":
            return "Summary: " + _words(rng, 25)
        game.requests.append(request)
        game.compactions_before.append(game.compactions)
        game.must_show.append((*game.pinned, *game.facts.values()))
        game.superseded.append(tuple(game.old_facts))
        game.current.append(dict(game.facts))
        if request.messages[-1].role == "user" and request.messages[-1].content.startswith("look"):
            return Reply(tool_calls=(("lookup", {"place": _words(rng, 2)}),))
        return _words(rng, rng.randint(5, 25))

    def lookup(place: str = "") -> dict[str, Any]:
        text = f"Round ends in {rng.randint(5, 80)} minutes."
        set_fact("round", text)
        return {"place": place, "about": _words(rng, 60), "facts": {"round": text}}

    def set_fact(key: str, text: str) -> None:
        if key in game.facts:
            game.old_facts.append(game.facts[key])
        game.facts[key] = text

    model = ScriptedModel(default=answer)
    compactor = build_compactor(Settings(_env_file=None, compaction_high_water=HIGH, **settings), model, budget=BUDGET)
    chat = Chat(model=model, compactor=compactor, tools=[make_tool("lookup", handler=lookup)], counter=COUNTER,
                auto_compact=False, facts_placement=facts_placement)
    state: bytes | None = None

    def settle(result: Any) -> bytes:
        blob: bytes = result.state
        if result.needs_compaction:
            spliced = chat.splice(blob, chat.compact_with_report(blob).state)
            if spliced.applied:
                game.compactions += 1
                game.after_compaction.append(COUNTER.count_messages(decode_state(spliced.state).messages))
            blob = spliced.state
        return blob

    for t in range(turns):
        if rng.random() < 0.4:
            state = settle(chat.apply_event(state, f"The player walked {rng.randint(10, 500)} m."))
        if t % 9 == 0:
            text = f"Pinned {t}: the player unlocked {_words(rng, 2)}."
            state = settle(chat.apply_event(state, text, pinned=True))
            game.pinned.append(text)
        if t % 7 == 0:
            text = f"The player's target is {_words(rng, 2)} ({t})."
            set_fact("target", text)
            state = settle(chat.apply_event(state, text, key="target"))
        user = ("look " if t % 5 == 0 else "") + _words(rng, rng.randint(2, 20))
        state = settle(chat.run_turn(state, system="You are the guide of the hunt.", user=user))
    return game


def test_between_compactions_each_request_starts_with_the_one_before() -> None:
    game = play()
    assert game.compactions >= 4
    checked = 0
    for i in range(1, len(game.requests)):
        if game.compactions_before[i] != game.compactions_before[i - 1]:
            continue  # a compaction came in between: it rewrites the prompt from the summary on
        before, now = game.requests[i - 1], game.requests[i]
        assert now.system == before.system, f"request {i}: the preamble changed between compactions"
        assert list(now.messages[: len(before.messages)]) == list(before.messages), f"request {i}: history rewritten"
        checked += 1
    assert checked >= len(game.requests) - game.compactions - 1  # every pair but those a compaction separates


def test_a_fact_that_changes_is_after_the_history_and_leaves_the_preamble_as_it_was() -> None:
    game = play()
    changed = [i for i in range(1, len(game.requests))
               if game.requests[i].after_history != game.requests[i - 1].after_history
               and game.compactions_before[i] == game.compactions_before[i - 1]]
    assert len(changed) >= 5  # facts changed between compactions, and the preamble stayed (test above)
    assert all(game.requests[i].system == game.requests[i - 1].system for i in changed)


def test_every_prompt_shows_every_pinned_item_and_only_the_latest_of_each_fact() -> None:
    game = play()
    assert game.compactions >= 4 and len(game.pinned) >= 5 and game.old_facts
    for request, texts, old in zip(game.requests, game.must_show, game.superseded, strict=True):
        shown = "\n".join([request.system or "", request.after_history or "", *(m.content for m in request.messages)])
        assert all(t in shown for t in texts), [t for t in texts if t not in shown]
        facts = request.after_history or ""
        assert not any(o in facts for o in old if o not in texts)  # a replaced fact is gone


def test_a_fact_is_sent_after_the_history_only_while_it_changed_since_the_last_compaction() -> None:
    """The preamble holds the facts as of the last compaction; after the history only those changed since, each with
    its key under a heading that says it replaces the value of that key above: the model always sees which value
    holds, and an unchanged fact is not sent twice in a request."""
    game = play()
    after = play(facts_placement="after_history")  # every fact after the history, with every request
    assert game.compactions >= 4
    settled = changed = 0
    for request, current in zip(game.requests, game.current, strict=True):
        preamble, tail = request.system or "", request.after_history or ""
        for key, text in current.items():
            line = f"- [{key}] {text}"
            assert line in preamble or line in tail
            assert not (line in preamble and line in tail)
            if line in tail and f"- [{key}] " in preamble:  # an older value is in the preamble: it is marked as replaced
                assert tail.startswith(CHANGED_FACTS_HEADING)
                changed += 1
            settled += line in preamble
            assert tail.count(f"- [{key}] ") <= 1  # one value of a key after the history: the current one
    assert settled and changed  # both cases were met
    def lines_after(g: Game) -> int:
        return sum((r.after_history or "").count("\n- ") for r in g.requests)

    assert lines_after(game) < lines_after(after)  # this game changes a fact every third turn: 111 lines against 143


def test_the_default_compacts_rarely_and_in_one_large_step() -> None:
    game = play(turns=90)
    before = play(turns=90, compaction=["tools", "summarize", "budget"])  # the chain the default was before
    assert game.compactions >= 4 and game.compactions * 1.5 <= before.compactions
    assert all(tokens <= HIGH for tokens in game.after_compaction)  # down to the summary and the last exchanges


def test_the_history_is_compacted_once_over_the_high_water_mark_and_the_prompt_stays_in_the_budget() -> None:
    game = play(turns=90)
    for request in game.requests:
        history = COUNTER.count_messages(request.messages)
        assert history <= HIGH + 300  # at most one turn's growth (a tool round) past the mark before it compacts
        prompt = history + COUNTER.count_text((request.system or "") + (request.after_history or ""))
        assert prompt <= BUDGET


# --- Hysteresis --------------------------------------------------------------------------------------------------


def _chat_with(compactor: Any, *, turns: int, tool_every: int = 0) -> tuple[Chat, bytes]:
    tool = make_tool("lookup", handler=lambda place="": {"place": place, "about": "x" * 600})
    script = []
    for t in range(turns):
        if tool_every and t % tool_every == 0:
            script.append(Reply(tool_calls=(("lookup", {"place": f"p{t}"}),)))
        script.append(f"answer {t} " + "word " * 10)
    chat = Chat(model=ScriptedModel(script), compactor=compactor, tools=[tool], auto_compact=False)
    state: bytes | None = None
    for t in range(turns):
        state = chat.run_turn(state, user=f"question {t} " + "word " * 10).state
    assert state is not None
    return chat, state


def test_hysteresis_does_nothing_under_its_mark_and_runs_every_step_over_it() -> None:
    summariser = ScriptedModel(default="They talked.")
    steps = (CompressToolExchanges(keep_recent=1), Summarize(summariser, keep_last=2, batch=1000))
    chat, state = _chat_with(Hysteresis(10_000, *steps), turns=8, tool_every=2)
    assert not chat.needs_compaction(state)  # the tool outputs and the exchanges wait for the mark
    assert not chat.compact_with_report(state).changed
    chat, state = _chat_with(Hysteresis(400, *steps), turns=8, tool_every=2)
    assert chat.needs_compaction(state)
    report = chat.compact_with_report(state)
    assert report.applied == ("compress_tool_exchanges", "summarize")  # the summariser's batch of 1,000 ignored
    after = decode_state(report.state)
    assert after.summary == "They talked." and len([m for m in after.messages if m.role == "user"]) <= 3
    assert not chat.needs_compaction(report.state)


def test_hysteresis_compresses_tool_outputs_only_when_it_compacts() -> None:
    chat, state = _chat_with(Hysteresis(10_000, CompressToolExchanges(keep_recent=1)), turns=8, tool_every=2)
    assert not chat.needs_compaction(state)
    assert not any(m.content.startswith(COMPRESSED_MARK) for m in decode_state(state).messages)
    eager, eager_state = _chat_with(Compose(CompressToolExchanges(keep_recent=1)), turns=8, tool_every=2)
    assert eager.needs_compaction(eager_state)  # on its own, the step rewrites an old output each time


def test_hysteresis_over_the_prompt_budget_compacts_whatever_the_stored_part() -> None:
    chat, state = _chat_with(Hysteresis(10_000, TokenBudget(300, 200), max_prompt_tokens=300), turns=8)
    assert chat.needs_compaction(state)
    assert chat.compact_with_report(state).tokens_after <= 200


def test_a_failing_step_inside_hysteresis_is_reported_and_the_others_still_run() -> None:
    summariser = ScriptedModel([RateLimitedError("slow down")])
    chat, state = _chat_with(Hysteresis(200, Summarize(summariser, keep_last=2), TokenBudget(5000, 150)), turns=8)
    report = chat.compact_with_report(state)
    assert report.errors and report.errors[0].startswith("summarize")
    assert report.applied == ("token_budget(5000)",) and report.tokens_after <= 150


def test_hysteresis_checks_its_arguments() -> None:
    with pytest.raises(ValueError):
        Hysteresis(0)
    with pytest.raises(ValueError):
        Hysteresis(10, max_prompt_tokens=0)


def test_a_forced_step_that_finds_nothing_to_do_is_not_reported_as_applied() -> None:
    summariser = ScriptedModel(default="They talked.")
    chat, state = _chat_with(Hysteresis(200, CompressToolExchanges(), Summarize(summariser, keep_last=2),
                                        TokenBudget(50_000)), turns=8)
    report = chat.compact_with_report(state)
    assert report.applied == ("summarize",)  # no tool output to compress, nothing over the budget's target
