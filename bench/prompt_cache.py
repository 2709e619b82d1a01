"""How much of each prompt the providers' caches can reuse: a 300-turn game through the real ``Chat`` and compaction
code (a scripted model, the worker's flow: a turn, then the follow-up compaction spliced onto the state), today's
policy against the worker's default policy, in one run.

    python bench/prompt_cache.py [--turns 300] [--seed 7] [--live-context] [--reply-tools] [--system-words N]

The game: varied player text (words drawn from a vocabulary of ~20,000 words, lengths as players write), silent game
events, pinned events, keyed facts the game keeps current (the target, the score), events the bot answers, a tool
call now and then (some of whose answers set facts), a summariser that writes a summary growing with what it folds.
Both policies play the same game (the same random draws). Every chat request is recorded as the provider receives
it (the OpenAI body, and the Anthropic body with Parley's cache breakpoints) and counted with tiktoken (o200k_base,
for both: a proxy for Claude's tokenizer).

Printed per policy:

- the share of prompt tokens that are a prefix of the conversation's previous request (the issue's measure);
- total prompt tokens of the chat requests (and, apart, the summariser's prompts: those share no prefix);
- the effective prompt cost in full-price token equivalents with OpenAI's automatic caching (a prefix of at least
  1,024 tokens, cached in steps of 128; cached input at 0.1x on the current GPT-5.x models, 0.5x on gpt-4o) and
  with Anthropic's breakpoint caching (a read of a prefix an earlier request wrote at one of its breakpoints, at
  0.1x; what is written at 1.25x; prefixes under 1,024 tokens not cached). The cache is assumed warm between a
  conversation's requests (a game's turns come within the caches' lifetime).

``--reply-tools`` offers the six WhatsApp reply tools too (``send_image``, ``send_location``, ...: about 730 tokens of
schemas in every request), as the worker does by default on the WhatsApp channel (``PARLEY_WHATSAPP_REPLY_TOOLS``);
without it the request is that of a deployment on another channel, or with them turned off.

``--live-context`` adds a live game context that changes every turn (docs/game.md), placed in the system prompt
(today's place) and after the history (``PARLEY_CONTEXT_PLACEMENT=after_history``), to show what it costs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from worker import Chat, Compose, CompressToolExchanges, ScriptedModel, Summarize, TokenBudget, Tool
from worker.conversation import ModelRequest, ModelResponse, Reply, Usage
from worker.conversation.compaction import Compactor
from worker.conversation.model import Model
from worker.conversation.tokens import TiktokenCounter, _load_encoding
from worker.llm import anthropic_messages, openai_chat
from worker.runtime.compaction_chain import build_compactor
from worker.settings import Settings
from worker.tools.reply_tools import reply_tools

COUNTER = TiktokenCounter(encoding="o200k_base")
ENCODING: Any = _load_encoding("o200k_base")
OPENAI_MIN, OPENAI_STEP = 1024, 128
ANTHROPIC_MIN, ANTHROPIC_LOOKBACK = 1024, 20
OPENAI_CACHED = {"gpt-5.x": 0.1, "gpt-4o": 0.5}
ANTHROPIC_READ, ANTHROPIC_WRITE = 0.1, 1.25

SYSTEM = """You are Scout, the guide of Harrogate Hunt, a GPS treasure hunt played on WhatsApp. Players walk the town,
find the landmarks the game sets as targets and tag them in the app; the game tells you what happens (their
position, what they tagged, their score) through game events and facts.

How to answer:
- Write short WhatsApp messages: two to four sentences, plain words, no markdown tables, at most one emoji.
- Encourage, never spoil: give hints about the current target (its history, what it looks like, which way to walk)
  but never its exact address unless the player has asked for help three times.
- Use the tools when the player asks about what is around them or for a hint; say what you found in your own words.
- Keep to the game. If the player asks for something else, answer briefly and bring them back to the hunt.
- Safety first: remind players to watch the traffic on the Stray and on Parliament Street, and never to enter a
  building that is closed or a private garden.
- If the player seems stuck for a long time, suggest the nearest café to rest and offer the hint tool.
- Never invent a score, a target or a rule: the game's events and facts are the truth; a player's claim that they
  tagged something is not.
- Answer in the player's language.

Rules of the hunt: each round has five targets; a target is tagged when the player is within 25 metres and taps
Tag; the round ends when all five are tagged or after ninety minutes; bonus points for tagging two targets within
ten minutes; a team of up to four players shares one score; hints cost ten points each after the first two."""

TOOLS = [
    Tool(name="nearby_places", description="Landmarks, cafés and shops within a radius of the player's position, "
         "with their distance and direction.",
         parameters={"type": "object", "properties": {
             "radius_m": {"type": "integer", "description": "Search radius in metres (50-1000)."},
             "kind": {"type": "string", "enum": ["landmark", "cafe", "shop", "any"]}}, "required": ["radius_m"]},
         handler=lambda **_: {}),
    Tool(name="target_hint", description="A hint about the player's current target; costs points after the first "
         "two hints of a round.", parameters={"type": "object", "properties": {
             "level": {"type": "integer", "description": "1 (vague) to 3 (nearly the answer)."}},
             "required": ["level"]}, handler=lambda **_: {}),
    Tool(name="team_status", description="The team's score, the targets tagged this round and the time left.",
         parameters={"type": "object", "properties": {}}, handler=lambda **_: {}),
]


def vocabulary(size: int = 20_000) -> list[str]:
    """Lower-case words of o200k_base's vocabulary (each a real word or a common word piece), the first ``size``
    by rank: a vocabulary as large as players' messages draw on."""
    words: list[str] = []
    for rank in range(ENCODING.n_vocab):
        try:
            piece = ENCODING.decode_single_token_bytes(rank).decode("ascii")
        except (KeyError, UnicodeDecodeError):
            continue
        if piece.startswith(" ") and piece[1:].isalpha() and piece[1:].islower() and len(piece) >= 4:
            words.append(piece[1:])
            if len(words) >= size:
                break
    return words


WORDS = vocabulary()


def text(rng: random.Random, lo: int, hi: int) -> str:
    """Words drawn from the vocabulary, lengths skewed short (as chat is), a sentence mark now and then."""
    n = max(lo, min(hi, int(rng.lognormvariate(0, 0.6) * (lo + hi) / 3)))
    out = []
    for i in range(n):
        w = rng.choice(WORDS)
        out.append(w.capitalize() if i == 0 or out[-1].endswith(".") else w)
        if i < n - 1 and rng.random() < 0.08:
            out[-1] += rng.choice([".", ",", "?"])
    return " ".join(out) + rng.choice([".", "?", "!", ""])


def place(rng: random.Random) -> str:
    return f"{rng.choice(WORDS).capitalize()} {rng.choice(['Hall', 'Gardens', 'Street', 'Theatre', 'Baths', 'Chapel'])}"


# --- the game --------------------------------------------------------------------------------------


@dataclass
class Turn:
    """One step of the game, drawn before any policy plays it (both policies see the same game)."""

    events: list[tuple[str, bool]] = field(default_factory=list)  # (text, pinned), silent
    facts: list[tuple[str, str]] = field(default_factory=list)  # (key, text), silent keyed events
    answered_event: str | None = None  # the bot answers this event (no player message)
    player: str = ""
    tool: tuple[str, dict[str, Any]] | None = None
    tool_answer: dict[str, Any] = field(default_factory=dict)
    reply: str = ""
    context: str = ""  # the live game context of this turn (used with --live-context)


def draw_game(turns: int, seed: int) -> list[Turn]:
    rng = random.Random(seed)
    game: list[Turn] = []
    tagged, target = 0, place(rng)
    for t in range(turns):
        turn = Turn()
        if t == 0:
            turn.events.append((f"The player joined team {rng.choice(WORDS).capitalize()} and chose the "
                                f"{rng.choice(['walking', 'cycling'])} route.", True))
            turn.facts += [("target", f"The player's current target is {target}."),
                           ("score", "The team has 0 points; 0 of 5 targets tagged this round.")]
        if rng.random() < 0.35:
            turn.events.append((f"The player moved {rng.randint(20, 400)} m "
                                f"{rng.choice(['north', 'south', 'east', 'west', 'north-east'])} towards "
                                f"{place(rng)}.", False))
        if rng.random() < 0.04:
            turn.events.append((f"The player unlocked the bonus: {text(rng, 6, 14)}", True))
        if rng.random() < 0.07:  # a tag: the target and the score change
            tagged, target = tagged + 1, place(rng)
            turn.facts += [("target", f"The player's current target is {target}."),
                           ("score", f"The team has {tagged * 100} points; {tagged % 5} of 5 targets tagged "
                                     "this round.")]
        if rng.random() < 0.05:
            turn.answered_event = f"The player tagged {place(rng)}! {text(rng, 4, 10)}"
        turn.player = text(rng, 2, 45)
        if rng.random() < 0.12:
            name = rng.choice(["nearby_places", "target_hint", "team_status"])
            args: dict[str, Any] = {"radius_m": rng.choice([100, 250, 500])} if name == "nearby_places" else (
                {"level": rng.randint(1, 3)} if name == "target_hint" else {})
            turn.tool = (name, args)
            turn.tool_answer = {"results": [{"name": place(rng), "distance_m": rng.randint(10, 900),
                                             "about": text(rng, 8, 30)} for _ in range(rng.randint(2, 6))]}
            if name == "team_status" and rng.random() < 0.5:
                turn.tool_answer["facts"] = {"round": f"Round {1 + tagged // 5}: {rng.randint(5, 85)} minutes "
                                                      "left."}
        turn.reply = text(rng, 12, 70)
        turn.context = (f"Player is {rng.randint(10, 900)} m from the target ({target}); {tagged % 5} of 5 "
                        f"targets tagged; {rng.randint(1, 89)} minutes left.")
        game.append(turn)
    return game


# --- recording -------------------------------------------------------------------------------------


def openai_tokens(request: ModelRequest) -> int:
    return sum(len(p) for p in openai_pieces(request))


_TOKENS: dict[str, list[int]] = {}


def tokens_of(piece: str) -> list[int]:
    if piece not in _TOKENS:
        _TOKENS[piece] = ENCODING.encode(piece, disallowed_special=())
    return _TOKENS[piece]


def openai_pieces(request: ModelRequest) -> list[list[int]]:
    """The request as OpenAI reads it, one piece per message (the tool definitions first, as OpenAI renders them
    into the prompt before the messages), each piece's tokens."""
    body = openai_chat.build_body("gpt-5", request, max_tokens=None, temperature=None)
    return [tokens_of(json.dumps(body.get("tools", []), sort_keys=True)), *(_framed(m) for m in body["messages"])]


ROLES = {"system": -2, "user": -3, "assistant": -4, "tool": -5}


def _framed(m: dict[str, Any]) -> list[int]:
    """One message's tokens as a chat template frames it: a start marker and the role, the content (and the tool
    calls), an end marker. OpenAI documents three tokens of framing a message; the markers here are three ids no
    text encodes to, so they compare as the real ones do."""
    content = m.get("content") or ""
    if not isinstance(content, str):
        content = json.dumps(content, sort_keys=True)
    calls = json.dumps(m["tool_calls"], sort_keys=True) if m.get("tool_calls") else ""
    return [-1, ROLES[m["role"]], *tokens_of(content), *(tokens_of(calls) if calls else ()), -6]


def anthropic_blocks(request: ModelRequest) -> tuple[list[list[int]], list[int]]:
    """The request as Anthropic reads it (tools, system, then each content block), each block's tokens, and the
    indexes of the blocks that carry a cache breakpoint."""
    body = anthropic_messages.build_body("claude-sonnet-4-5", request, max_tokens=512, temperature=None,
                                         prompt_cache=True)
    blocks: list[dict[str, Any]] = [{"tools": body.get("tools", [])}]
    system = body.get("system")
    blocks += system if isinstance(system, list) else ([{"type": "text", "text": system}] if system else [])
    for m in body["messages"]:
        for i, b in enumerate(m["content"]):
            blocks.append({**b, "role": m["role"]} if i == 0 else b)
    marks = [i for i, b in enumerate(blocks) if "cache_control" in b]
    return [_block_tokens(b) for b in blocks], marks


def _block_tokens(block: dict[str, Any]) -> list[int]:
    """A block's tokens: a marker (and the role, first in a message), then the text, or the JSON of anything else."""
    head = [-7, *([ROLES[block["role"]]] if "role" in block else [])]
    if block.get("type") == "text":
        return [*head, *tokens_of(block["text"])]
    rest = {k: v for k, v in block.items() if k not in ("cache_control", "role")}
    return [*head, *tokens_of(json.dumps(rest, sort_keys=True))]


@dataclass
class Recorder:
    chat_requests: list[ModelRequest] = field(default_factory=list)
    one_system_block: bool = False
    summary_prompt_tokens: int = 0
    summaries: int = 0
    # What every chat request must show: the pinned events and the current keyed facts when it was made.
    must_show: list[tuple[str, ...]] = field(default_factory=list)
    pinned: list[str] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)
    # The indexes of the chat requests that came first after a compaction was spliced.
    after_compaction: set[int] = field(default_factory=set)


class GameModel:
    """The scripted model of the game: the turn's planned tool call and reply; a summary growing with what it
    folds (a quarter of the new lines' length, up to 450 words); usage = the exact prompt tokens."""

    provider = "openai"
    model_name = "gpt-5"
    reads_images = False

    def __init__(self, recorder: Recorder, seed: int) -> None:
        self.recorder = recorder
        self.turn = Turn()
        self.rng = random.Random(seed)
        self.inner = ScriptedModel(provider="openai", model_name="gpt-5", default=self._answer)

    def complete(self, request: ModelRequest) -> ModelResponse:
        response = self.inner.complete(request)
        tokens = openai_tokens(request) if request.purpose == "chat" else COUNTER.count_text(
            (request.system or "") + request.messages[0].content)
        if request.purpose == "chat":
            self.recorder.chat_requests.append(request)
            self.recorder.must_show.append((*self.recorder.pinned, *self.recorder.facts.values()))
        else:
            self.recorder.summary_prompt_tokens += tokens
            self.recorder.summaries += 1
        return ModelResponse(message=response.message, finish_reason=response.finish_reason,
                             usage=Usage(prompt_tokens=tokens, completion_tokens=40), model=self.model_name)

    def _answer(self, request: ModelRequest) -> Reply | str:
        if request.purpose == "summarize":
            prompt = request.messages[0].content
            current, _, new = prompt.partition("Next part of the conversation:\n")
            words = len(current.split()) - 4 + len(new.split()) // 4
            return text(self.rng, min(450, max(40, words)), min(450, max(40, words)))
        if self.turn.tool is not None and request.messages[-1].role != "tool":
            return Reply(tool_calls=(self.turn.tool,))
        return self.turn.reply


# --- playing a policy ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    name: str
    compactor: Callable[[Model], Compactor]
    chat_options: dict[str, Any] = field(default_factory=dict)
    context_after_history: bool = False
    # The Anthropic body as before this change: one breakpoint at the end of the whole preamble (none after the
    # caller's prompt).
    one_system_block: bool = False


def todays_compactor(model: Model) -> Compactor:
    """The worker's default chain before issue 33 (settings unset, a 6,000-token budget)."""
    return Compose(CompressToolExchanges(keep_recent=3), Summarize(model, keep_last=6, trigger_tokens=4800),
                   TokenBudget(6000))


DEFAULTS = Settings(_env_file=None)


def default_compactor(model: Model) -> Compactor:
    """The worker's default chain now (settings unset), as ``worker.runtime.build_chat`` builds it for gpt-5."""
    return build_compactor(DEFAULTS, model, budget=6000)


def variant_compactor(high_water: int, keep_last: int) -> Callable[[Model], Compactor]:
    """The default chain with another high-water mark and number of exchanges kept (``PARLEY_COMPACTION_HIGH_WATER``,
    ``PARLEY_COMPACTION_KEEP_LAST``)."""
    settings = Settings(_env_file=None, compaction_high_water=high_water, compaction_keep_last=keep_last)
    return lambda model: build_compactor(settings, model, budget=6000)


def play(policy: Policy, game: Sequence[Turn], seed: int, live_context: bool, system: str = SYSTEM,
         whatsapp_tools: bool = False) -> Recorder:
    recorder = Recorder(one_system_block=policy.one_system_block)
    model = GameModel(recorder, seed)
    def answer(**_: Any) -> dict[str, Any]:
        recorder.facts.update(model.turn.tool_answer.get("facts", {}))  # a game tool's facts hold from now on
        return model.turn.tool_answer

    tools = [Tool(name=t.name, description=t.description, parameters=t.parameters, handler=answer) for t in TOOLS]
    tools += reply_tools() if whatsapp_tools else []  # after the game's, as worker.runtime.build_service adds them
    chat = Chat(model=model, compactor=policy.compactor(model), tools=tools, counter=COUNTER, auto_compact=False,
                **policy.chat_options)
    state: bytes | None = None

    def settle(result: Any) -> bytes:
        """The worker's flow: commit, then the follow-up compaction, spliced onto the newest state."""
        blob: bytes = result.state
        if result.needs_compaction:
            report = chat.compact_with_report(blob)
            spliced = chat.splice(blob, report.state)
            if spliced.applied and report.changed:
                recorder.after_compaction.add(len(recorder.chat_requests))
            blob = spliced.state
        return blob

    for turn in game:
        model.turn = turn
        for text_, pinned in turn.events:
            state = settle(chat.apply_event(state, text_, pinned=pinned))
            recorder.pinned += [text_] if pinned else []
        for key, text_ in turn.facts:
            state = settle(chat.apply_event(state, text_, key=key))
            recorder.facts[key] = text_
        if turn.answered_event:
            state = settle(chat.run_event_turn(state, turn.answered_event, system=system))
        prompt, after = system, ()
        if live_context and policy.context_after_history:
            after = (turn.context,)
        elif live_context:
            prompt = f"{system}\n\n{turn.context}"
        state = settle(chat.run_turn(state, system=prompt, user=turn.player, after_history=after))
    return recorder


# --- what the caches make of it --------------------------------------------------------------------


def common_prefix(a: Sequence[list[int]], b: Sequence[list[int]]) -> int:
    """Tokens at the start of ``b`` that are the start of ``a`` (whole equal pieces, then the equal start of the
    first piece that differs)."""
    shared = 0
    for x, y in zip(a, b, strict=False):
        if x == y:
            shared += len(x)
            continue
        n = 0
        for p, q in zip(x, y, strict=False):
            if p != q:
                break
            n += 1
        return shared + n
    return shared


def openai_cached(prefix: int) -> int:
    return 0 if prefix < OPENAI_MIN else OPENAI_MIN + (prefix - OPENAI_MIN) // OPENAI_STEP * OPENAI_STEP


@dataclass
class Figures:
    new: int  # tokens of the messages each request holds that the one before did not (no cache can hold them)
    requests: int
    tokens: int
    prefix: int
    openai_cached: int
    anthropic_tokens: int  # the same requests as Anthropic's bodies (their own framing)
    anthropic_read: int
    anthropic_written: int
    summary_tokens: int
    largest: int
    lost_compaction: int = 0  # not a prefix, in the first request after a compaction
    lost_after: int = 0  # not a prefix, in the text after the history of the other requests

    def lost(self) -> str:
        """Where the prefix share's loss is: the requests right after a compaction, the text after the history of the
        others (keyed facts, a live context) and the rest (their new messages; with facts in the preamble, a changed
        fact and what follows it)."""
        rest = self.tokens - self.prefix - self.lost_compaction - self.lost_after
        return (f"compactions {self.lost_compaction / self.tokens:.1%}, after the history {self.lost_after / self.tokens:.1%}, "
                f"the rest {rest / self.tokens:.1%}")

    @property
    def share(self) -> float:
        return self.prefix / self.tokens

    def openai_cost(self, rate: float) -> float:
        return self.tokens - self.openai_cached + self.openai_cached * rate + self.summary_tokens

    @property
    def anthropic_cost(self) -> float:
        plain = self.anthropic_tokens - self.anthropic_read - self.anthropic_written
        return (plain + self.anthropic_read * ANTHROPIC_READ + self.anthropic_written * ANTHROPIC_WRITE
                + self.summary_tokens)


def anthropic_cache(requests: Sequence[ModelRequest]) -> tuple[int, int, int]:
    """Tokens read from and written to Anthropic's cache over the requests: a request reads the longest prefix an
    earlier request wrote at one of its breakpoints, checked at this request's block boundaries up to 20 blocks
    before each of its own breakpoints; it writes the prefix up to each of its breakpoints (of at least 1,024
    tokens) beyond what it read. Returns the tokens of the requests, those read and those written."""
    written: set[tuple[int, str]] = set()
    read_total = write_total = total = 0
    for request in requests:
        blocks, marks = anthropic_blocks(request)
        ends, digests, pos = [], [], 0
        h = hashlib.blake2b(digest_size=16)
        for b in blocks:
            pos += len(b)
            h.update(json.dumps(b).encode())
            ends.append(pos)
            digests.append(h.copy().hexdigest())
        total += pos
        read = 0
        for mark in marks:
            for i in range(mark, max(-1, mark - ANTHROPIC_LOOKBACK), -1):
                if (ends[i], digests[i]) in written:
                    read = max(read, ends[i])
                    break
        last = max((ends[m] for m in marks if ends[m] >= ANTHROPIC_MIN), default=0)
        write_total += max(0, last - read)
        read_total += read
        for m in marks:
            if ends[m] >= ANTHROPIC_MIN:
                written.add((ends[m], digests[m]))
    return total, read_total, write_total


def measure(recorder: Recorder) -> Figures:
    previous: list[list[int]] = []
    tokens = prefix = cached = largest = new = last_seq = lost_compaction = lost_after = 0
    for i, request in enumerate(recorder.chat_requests):
        new += COUNTER.count_messages(m for m in request.messages if m.seq > last_seq)
        last_seq = max((m.seq for m in request.messages), default=last_seq)
        pieces = openai_pieces(request)
        size = sum(len(p) for p in pieces)
        shared = common_prefix(previous, pieces)
        tokens, prefix, cached, largest = tokens + size, prefix + shared, cached + openai_cached(shared), max(largest, size)
        if i in recorder.after_compaction:
            lost_compaction += size - shared
        elif request.after_history:
            lost_after += min(len(pieces[-1]), size - shared)
        previous = pieces
    anthropic, read, write = anthropic_cache([replace(r, system_stable=0) if recorder.one_system_block else r
                                   for r in recorder.chat_requests])
    return Figures(new, len(recorder.chat_requests), tokens, prefix, cached, anthropic, read, write,
                   recorder.summary_prompt_tokens, largest, lost_compaction, lost_after)


def pinned_everywhere(recorder: Recorder) -> tuple[int, int]:
    """Chat requests that show every pinned event and the current text of every keyed fact given before them, and
    the chat requests."""
    ok = 0
    for request, texts in zip(recorder.chat_requests, recorder.must_show, strict=True):
        shown = "\n".join([request.system or "", request.after_history or "", *(m.content for m in request.messages)])
        ok += all(t in shown for t in texts)
    return ok, len(recorder.chat_requests)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--live-context", action="store_true")
    parser.add_argument("--reply-tools", action="store_true", help="offer the WhatsApp reply tools too (the worker's "
                        "default on the WhatsApp channel)")
    parser.add_argument("--variant", action="append", default=[], metavar="HIGH_WATER:KEEP_LAST",
                        help="also play the default chain with this high-water mark and exchanges kept (repeatable)")
    parser.add_argument("--system-words", type=int, default=0, help="words of further rules added to the system "
                        "prompt (a longer prompt, the same for every policy)")
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.ERROR)
    game = draw_game(args.turns, args.seed)
    policies = [Policy("today", todays_compactor, {"facts_placement": "preamble"}, one_system_block=True),
                Policy("default", default_compactor, {"facts_placement": DEFAULTS.memory.facts_placement}),
                Policy("default, facts after history", default_compactor, {"facts_placement": "after_history"}),
                Policy("default, facts in preamble", default_compactor, {"facts_placement": "preamble"})]
    for variant in args.variant:
        high, keep = (int(x) for x in variant.split(":"))
        policies.append(Policy(f"default, mark {high}, keep {keep}", variant_compactor(high, keep),
                               {"facts_placement": DEFAULTS.memory.facts_placement}))
    if args.live_context:
        policies.append(Policy("default, context after history", default_compactor, context_after_history=True))
    system = SYSTEM + (f"\n\nMore rules: {text(random.Random(args.seed + 1), args.system_words, args.system_words)}"
                       if args.system_words else "")
    played = {p.name: play(p, game, args.seed, args.live_context, system, args.reply_tools) for p in policies}
    results = {name: measure(rec) for name, rec in played.items()}
    base = results["today"]
    print(f"{args.turns}-turn game, seed {args.seed}{', live context every turn' if args.live_context else ''}"
          f"{', WhatsApp reply tools' if args.reply_tools else ''}, "
          f"system prompt and tools {len(openai_pieces(played['today'].chat_requests[0])[0]) + COUNTER.count_text(system):,} "
          "tokens; costs relative to today's policy (the summariser's prompts included, at full price)")
    print(f"{'policy':<32} {'requests':>8} {'prefix share':>12} {'prompt tokens':>13} {'largest':>7} "
          f"{'summaries':>9} {'summariser':>10} {'OpenAI 0.1x':>11} {'OpenAI 0.5x':>11} {'Anthropic':>10} {'pinned+facts':>12}")
    for name, f in results.items():
        ok, n = pinned_everywhere(played[name])
        print(f"{name:<32} {f.requests:>8} {f.share:>12.1%} {f.tokens:>13,} {f.largest:>7,} "
              f"{played[name].summaries:>9} {f.summary_tokens:>10,} "
              f"{f.openai_cost(0.1) / base.openai_cost(0.1):>10.2f}x {f.openai_cost(0.5) / base.openai_cost(0.5):>10.2f}x "
              f"{f.anthropic_cost / base.anthropic_cost:>9.2f}x {ok:>6}/{n}")
    print(f"  ceiling at today's total: {1 - base.new / base.tokens:.1%} of prompt tokens can be a prefix of the "
          f"previous request ({base.new:,} tokens are messages the previous request did not hold)")
    for name, f in results.items():
        print(f"  {name}: effective prompt cost in full-price tokens (uncached {f.tokens + f.summary_tokens:,}): "
              f"OpenAI at 0.1x {f.openai_cost(0.1):,.0f}, at 0.5x {f.openai_cost(0.5):,.0f}; Anthropic "
              f"{f.anthropic_cost:,.0f} of {f.anthropic_tokens + f.summary_tokens:,} (read {f.anthropic_read:,}, written "
              f"{f.anthropic_written:,}); not a prefix: {f.lost()}")


if __name__ == "__main__":
    main()
