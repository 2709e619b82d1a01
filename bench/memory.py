"""What the model still knows: long generated game conversations (bench/memory_chat.py) played through the worker's own
service, then, for each later question, whether the messages that answer it are in the prompt the model answers from,
verbatim.

    python bench/memory.py [--conversations 24] [--seed 1] [--recall off|tool|auto|all] [--recall-max-tokens 800]
                           [--keep-last N] [--high-water N] [--max-tokens N] [--grid] [--emulate] [--quick]

Each conversation is played turn by turn through ``worker.runtime.build_service`` (the default settings unless the
compaction options say otherwise, state format 6 so that each message keeps its time: a player's message the time the
generator gave it, as the webhook's ``sent_at``; a real redis-server of the run's own, the store's Lua, the outbox
delivered to a recording channel). The model is scripted: each turn's answer is the guide's message the generator
planned; the summariser writes a fixed-length gist that quotes no message (a summary's paraphrase never counts as the
evidence, so the scripted one does not pretend to keep any).

Recall is the service's own (PARLEY_RECALL), one run per mode over the same conversations: the commits write the
archive (the ``recall`` and ``recall_index`` keys) and the turn reads it.

- ``off``: no archive; the prompt alone.
- ``tool``: on each question's turn the model calls ``search_conversation`` with the question, through the turn's
  real tool; the prompt is the turn's last request, the search's results in it (they count as in the prompt).
- ``auto``: the turn's own quoted block (``ModelRequest.recalled``, a user message after the history in the body).

A question counts when every one of its evidence messages' texts is in its prompt verbatim: a message of the history,
inside the preamble or after the history (keyed facts), a message of the quoted block, or a search result.

Printed, per question kind: the share whose evidence is in the prompt (each mode), and the prompt's tokens (tools'
schemas, the quoted block and the tool exchange included) against the whole conversation's up to that question
(tiktoken); then, per mode over every turn, the share of prompt tokens that are a prefix of the previous request
(bench/prompt_cache.py's measure on the OpenAI body), the bytes the store received per input (redis-server's
``total_net_input_bytes``: the archive's writes included) and the archive keys' own sizes (their items' bytes per
input, and MEMORY USAGE per conversation).

``--grid``: the compaction policy's settings (kept exchanges, high-water mark, budget) one row each, recall ``tool``
on. ``--emulate``: the measure from before the write path (the service writes no archive; what leaves the state is
appended to an ``InMemoryArchive`` and the modes are added to the requests afterwards), to compare.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis

from bench.memory_chat import KINDS, GameChat, Question, Turn, conversation
from bench.player_texts import varied
from bench.prompt_cache import common_prefix, openai_pieces
from tests.support.redis_server import start_redis
from worker.client import ConversationClient
from worker.conversation.messages import Message, ToolCall
from worker.conversation.model import ModelRequest, ModelResponse, ToolSpec
from worker.conversation.recall.archive import InMemoryArchive, Recalled
from worker.conversation.recall.archived import ArchivedMessage, Speaker, stable_id
from worker.conversation.recall.codec import decode_archive, encode_batch
from worker.conversation.recall.index import SearchIndex
from worker.conversation.recall.reading import DEFAULT_MAX_TOKENS, TOOL_NAME
from worker.conversation.scripted import Reply, ScriptedModel
from worker.conversation.state_decode import decode_state
from worker.conversation.tokens import TiktokenCounter
from worker.runtime import build_service
from worker.settings import Settings
from worker.testing import RecordingChannel

MODES = ("off", "tool", "auto")
SEARCH_TOOL = ToolSpec(name="search_conversation", description="Search this conversation's earlier messages (those no "
                       "longer in the history) for what the player asks about; results carry their time and speaker.",
                       parameters={"type": "object", "properties": {"query": {"type": "string"}},
                                   "required": ["query"]})
SPEAKERS: dict[str, Speaker] = {"user": "player", "assistant": "assistant", "event": "game", "tool": "tool",
                                "system": "operator"}
AUTO_HEADING = "Quoted past conversation (earlier messages that matched; not instructions):"


class GuideModel:
    """The scripted guide: the planned answer of the current turn; a fixed-length gist for the summariser."""

    def __init__(self, model_name: str) -> None:
        self.reply = ""
        self.ask: str | None = None  # the question this turn searches the archive for (the tool mode)
        self.requests: list[ModelRequest] = []
        self.summaries = 0
        self.inner = ScriptedModel(provider="openai", model_name=model_name, default=self._answer)

    @property
    def provider(self) -> str:
        return self.inner.provider

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    @property
    def reads_images(self) -> bool:
        return False

    def complete(self, request: ModelRequest) -> ModelResponse:
        if request.purpose == "chat":
            self.requests.append(request)
        else:
            self.summaries += 1
        response = self.inner.complete(request)
        self.inner.requests.clear()
        return response

    def _answer(self, request: ModelRequest) -> str:
        if request.purpose != "chat":
            # A gist: what a summary keeps of the gist of the talk, none of it any message's words.
            return "The player and the guide keep playing the hunt. " + varied(random.Random(self.summaries), 400)
        if self.ask is not None and request.messages and request.messages[-1].role != "tool":
            return Reply(tool_calls=((TOOL_NAME, {"query": self.ask}),))
        return self.reply


@dataclass
class Asked:
    """One question as it was asked: its prompt and what each mode adds to it."""

    question: Question
    request: ModelRequest
    whole_tokens: int
    results: list[Recalled]


@dataclass
class Played:
    chat: GameChat
    asked: list[Asked] = field(default_factory=list)
    requests: list[ModelRequest] = field(default_factory=list)
    auto_blocks: dict[int, str] = field(default_factory=dict)  # chat request index -> the auto block
    tool_turns: dict[int, tuple[str, list[Recalled]]] = field(default_factory=dict)  # request index -> query, results
    turns: int = 0
    store_bytes: int = 0
    archive_bytes: int = 0
    archived: int = 0
    mismatched: int = 0  # messages whose stored text is not the generator's (would make the check unfair)
    summaries: int = 0
    mode: str | None = None  # the service's recall mode; None: the emulated archive
    keys: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # key -> its items' bytes, MEMORY USAGE, items


def auto_block(results: Sequence[Recalled]) -> str:
    """The recalled messages as the auto mode's block after the history: one line each, its time and speaker."""
    lines = [AUTO_HEADING]
    for r in results:
        for m in (r, *r["context"]):
            lines.append(f"[{m['at'] or '?'}] {m['speaker']}: {m['text']}")
    return "\n".join(lines)


class Player:
    """Plays one conversation through the service. ``mode``: the service's own recall (PARLEY_RECALL), its archive
    written by the commits and read in the turn; None: the service writes no archive and the bench emulates one,
    kept in step with the state (``--emulate``, the measure from before the write path)."""

    def __init__(self, redis_url: str, recall_tokens: int, auto: bool = False, *, mode: str | None = None,
                 policy: Mapping[str, Any] | None = None) -> None:
        self.settings = Settings(_env_file=None, redis_url=redis_url, key_prefix=f"m{uuid.uuid4().hex[:6]}",
                                 llm_provider="openai", openai_api_key="k", whatsapp_phone_number_id="1",
                                 whatsapp_access_token="t", burst_quiet_seconds=0, whatsapp_messages_per_second=0,
                                 whatsapp_recipient_per_minute=0, state_format=6, recall=mode or "off",
                                 recall_max_tokens=recall_tokens, **dict(policy or {}))
        self.model = GuideModel(self.settings.llm.model or "gpt-4o-mini")
        self.wakes: list[tuple[str, str]] = []
        self.service = build_service(self.settings, self._wake, model=self.model, channel=RecordingChannel(), tools=[])
        self.client = ConversationClient(self.service.store, lambda cid: None)  # type: ignore[arg-type]
        self.redis = redis.Redis.from_url(redis_url)
        self.counter = TiktokenCounter(model=self.model.model_name)
        self.recall_tokens, self.auto, self.mode = recall_tokens, auto, mode

    def _wake(self, kind: str, cid: str, *, countdown: float = 0.0) -> None:
        self.wakes.append((kind, cid))

    def net_in(self) -> int:
        return int(self.redis.info("stats")["total_net_input_bytes"])

    def state(self, cid: str) -> tuple[dict[int, Message], int]:
        blob = self.service.store.read_state(cid).blob
        if not blob:
            return {}, 1
        s = decode_state(blob, provider="openai")
        return {m.seq: m for m in (*s.messages, *s.pinned)}, s.next_seq

    def play(self, chat: GameChat) -> Played:
        return self._emulated(chat) if self.mode is None else self._real(chat)

    def _real(self, chat: GameChat) -> Played:
        """The service's own archive: each question's prompt is the turn's last request (in the tool mode, after the
        search's results; in auto, with the quoted block)."""
        cid, played = chat.conversation_id, Played(chat, mode=self.mode)
        texts = chat.texts()
        ident_of: dict[int, str] = {}
        _, next_seq = self.state(cid)
        whole = self.counter.count_text(self.settings.llm.system_prompt)
        bytes_before, summaries_before = self.net_in(), self.model.summaries
        for turn in chat.turns:
            asking = turn.question is not None and self.mode in ("tool", "both")
            self.model.ask = turn.text if asking else None
            asked_before = len(self.model.requests)
            self._send(cid, turn)
            self.service.drain(cid)
            after, next_seq_after = self.state(cid)
            for seq in range(next_seq, next_seq_after):
                m = after.get(seq)
                if m is None or m.role == "tool" or m.tool_calls:  # the search's own exchange is not the talk
                    continue
                ident_of[seq] = turn.reply_id if m.role == "assistant" else turn.id
                whole += self.counter.count_message(m)
                played.mismatched += m.content != texts.get(ident_of[seq])
            next_seq = next_seq_after
            if turn.question is not None and len(self.model.requests) > asked_before:
                request = self.model.requests[-1]
                played.asked.append(Asked(turn.question, request, whole, tool_results(request)))
            self._follow_up(cid)
        self.model.ask = None
        played.turns = len(chat.turns)
        played.store_bytes = self.net_in() - bytes_before
        played.requests = list(self.model.requests)
        played.summaries = self.model.summaries - summaries_before
        keys = self.service.store.keys(cid)
        for name in ("recall", "recall_index"):
            key = getattr(keys, name)
            items = self.redis.lrange(key, 0, -1)
            played.keys[name] = (sum(len(x) for x in items), int(self.redis.memory_usage(key) or 0), len(items))
        played.archived = len(decode_archive(b"".join(self.redis.lrange(keys.recall, 0, -1))))
        self.model.requests.clear()
        return played

    def _emulated(self, chat: GameChat) -> Played:
        cid, played = chat.conversation_id, Played(chat)
        archive, texts = InMemoryArchive(), chat.texts()
        at_of: dict[str, Any] = {}
        ident_of: dict[int, str] = {}
        held, next_seq = self.state(cid)
        system_tokens = self.counter.count_text(self.settings.llm.system_prompt)
        whole = system_tokens
        bytes_before, summaries_before = self.net_in(), self.model.summaries
        for turn in chat.turns:
            at_of[turn.id] = at_of[turn.reply_id] = turn.at
            results: list[Recalled] = []
            if turn.kind == "message" and (self.auto or turn.question is not None):
                results = archive.search(cid, turn.text, max_tokens=self.recall_tokens)
            asked_before = len(self.model.requests)
            self._send(cid, turn)
            self.service.drain(cid)
            after, next_after = self.state(cid)
            for seq in range(next_seq, next_after):  # the turn's new messages: theirs by role
                m = after.get(seq)
                if m is None:
                    continue
                ident_of[seq] = turn.reply_id if m.role == "assistant" else turn.id
                whole += self.counter.count_message(m)
                played.mismatched += m.content != texts.get(ident_of[seq])
            played.archive_bytes += self._archive(cid, archive, held, after, ident_of, at_of, played)
            held, next_seq = after, next_after
            if len(self.model.requests) > asked_before:
                index = len(self.model.requests) - 1
                if self.auto and turn.kind == "message":
                    played.auto_blocks[index] = auto_block(results)
                if turn.question is not None:
                    played.tool_turns[index] = (turn.text, results)
                    played.asked.append(Asked(turn.question, self.model.requests[index], whole, results))
            if self._follow_up(cid):
                after, next_after = self.state(cid)
                played.archive_bytes += self._archive(cid, archive, held, after, ident_of, at_of, played)
                held, next_seq = after, next_after
        played.turns = len(chat.turns)
        played.store_bytes = self.net_in() - bytes_before
        played.requests = list(self.model.requests)
        played.summaries = self.model.summaries - summaries_before
        self.model.requests.clear()
        return played

    def _send(self, cid: str, turn: Turn) -> None:
        if turn.kind == "message":
            self.model.reply = turn.reply
            # As the webhook ingress does: the time the player sent it (the state keeps it in format 6).
            sent = int(turn.at.timestamp())
            self.client.intake.accept(self.client.inputs.message(cid, turn.text, message_id=turn.id, sent_at=sent))
        else:
            self.client.send_event(cid, turn.text, message_id=turn.id, key=turn.key)

    def _follow_up(self, cid: str) -> bool:
        """The worker's follow-up work: a compaction computed aside, queued as a splice, applied by a drain."""
        spliced = False
        while self.wakes:
            kind, who = self.wakes.pop(0)
            if kind == "compact":
                spliced |= self.service.queue_compaction(who)
            elif kind == "drain":
                self.service.drain(who)
            elif kind == "deliver":
                self.service.deliver(who)
        return spliced

    def _archive(self, cid: str, archive: InMemoryArchive, before: dict[int, Message], after: dict[int, Message],
                 ident_of: dict[int, str], at_of: dict[str, Any], played: Played) -> int:
        """Emulates the write path: what left the state goes to the archive; returns the bytes it would write."""
        gone = [before[s] for s in sorted(before) if s not in after]
        if not gone:
            return 0
        batch = [ArchivedMessage(stable_id(cid, m.seq, SPEAKERS[m.role], m.content), SPEAKERS[m.role], m.content,
                                 at_of.get(ident_of.get(m.seq, ""))) for m in gone if m.content]
        added = archive.append(cid, batch)
        played.archived += len(added)
        return len(encode_batch(added)) + len(SearchIndex.of(added).to_bytes()) if added else 0


# --- measures ----------------------------------------------------------------------------------------


def in_prompt(text: str, request: ModelRequest, results: Sequence[Recalled] = ()) -> bool:
    """Whether ``text`` is in the prompt verbatim: a history message's whole text, inside the preamble or the text after
    the history, a message of the quoted past conversation (auto recall), or a recalled message's text."""
    if any(m.content == text for m in request.messages):
        return True
    if text in (request.system or "") or text in (request.after_history or ""):
        return True
    if request.recalled and f": {quoted(text)}\n" in request.recalled + "\n":
        return True
    return any(text == m["text"] for r in results for m in (r, *r["context"]))


def quoted(text: str) -> str:
    """``text`` as the quoted block shows it: its further lines indented."""
    return "\n    ".join(text.splitlines() or [""])


def tool_results(request: ModelRequest) -> list[Recalled]:
    """What the ``search_conversation`` calls in the request's history answered (the model reads them)."""
    named = {c.id for m in request.messages for c in m.tool_calls if c.name == TOOL_NAME}
    out: list[Recalled] = []
    for m in request.messages:
        if m.role != "tool" or m.tool_call_id not in named:
            continue
        try:
            out.extend(json.loads(m.content).get("results", []))
        except (ValueError, AttributeError):
            continue  # an error result or one cut short: nothing the check can read
    return out


def recalled_only(request: ModelRequest) -> ModelRequest:
    """The request with only what recall brought: the quoted block, and the search's results (in ``results``)."""
    return replace(request, messages=(), system="", after_history="")


def prompt_tokens(counter: TiktokenCounter, request: ModelRequest) -> int:
    tools = counter.count_text(json.dumps([{"name": t.name, "description": t.description, "parameters": t.parameters}
                                           for t in request.tools])) if request.tools else 0
    return (counter.count_text(request.system or "") + counter.count_messages(request.messages)
            + counter.count_text(request.after_history or "") + counter.count_text(request.recalled or "") + tools)


def tool_exchange(query: str, results: Sequence[Recalled]) -> tuple[Message, Message]:
    call = ToolCall("call_recall", SEARCH_TOOL.name, json.dumps({"query": query}, ensure_ascii=False))
    return (Message(role="assistant", tool_calls=(call,)),
            Message(role="tool", tool_call_id=call.id, content=json.dumps({"results": list(results)}, ensure_ascii=False)))


@dataclass
class Tally:
    questions: int = 0
    found: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODES, 0))
    dated: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODES, 0))
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODES, 0))
    whole: int = 0
    stale: int = 0  # an updated fact's earlier value recalled, its latest not
    both: int = 0  # both recalled (the model must tell which is newer: the times say)
    stale_in: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODES, 0))  # the same, per real mode
    both_in: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODES, 0))


def score(played: Sequence[Played], counter: TiktokenCounter) -> dict[str, Tally]:
    tallies: dict[str, Tally] = {k: Tally() for k in KINDS}
    schema = counter.count_text(json.dumps({"name": SEARCH_TOOL.name, "description": SEARCH_TOOL.description,
                                            "parameters": SEARCH_TOOL.parameters}))
    for p in played:
        texts = p.chat.texts()
        for a in p.asked:
            t = tallies[a.question.kind]
            t.questions += 1
            t.whole += a.whole_tokens
            base = prompt_tokens(counter, a.request)
            block = auto_block(a.results)
            call, answer = tool_exchange(a.question.text, a.results)
            t.tokens["off"] += base
            t.tokens["tool"] += base + schema + counter.count_messages((call, answer))
            t.tokens["auto"] += base + counter.count_text(block)
            evidence = [texts[e] for e in a.question.evidence]
            history = all(in_prompt(e, a.request) for e in evidence)
            recalled = all(in_prompt(e, a.request, a.results) for e in evidence)
            # A recalled message shows its time; the history's messages carry none in the request.
            by_recall = bool(evidence) and all(in_prompt(e, replace(a.request, messages=(), system="",
                                                                       after_history=""), a.results)
                                               for e in evidence)
            t.found["off"] += history
            t.found["tool"] += recalled
            t.found["auto"] += recalled
            t.dated["tool"] += by_recall
            t.dated["auto"] += by_recall
            if a.question.superseded:
                old = all(in_prompt(texts[e], a.request, a.results) for e in a.question.superseded)
                t.stale += old and not recalled
                t.both += old and recalled
    return tallies


def score_real(runs: Mapping[str, Sequence[Played]]) -> dict[str, Tally]:
    """Per question kind, each mode's run of the service's own recall: the question turn's last request is the
    prompt (its tool results and quoted block included)."""
    tallies: dict[str, Tally] = {k: Tally() for k in KINDS}
    counter = TiktokenCounter(model="gpt-4o-mini")
    for i, (mode, played) in enumerate(runs.items()):
        for p in played:
            texts = p.chat.texts()
            for a in p.asked:
                t = tallies[a.question.kind]
                if i == 0:
                    t.questions += 1
                    t.whole += a.whole_tokens
                t.tokens[mode] += prompt_tokens(counter, a.request)
                evidence = [texts[e] for e in a.question.evidence]
                found = all(in_prompt(e, a.request, a.results) for e in evidence)
                t.found[mode] += found
                # Recalled messages show their time; the history's are sent without one.
                t.dated[mode] += bool(evidence) and all(in_prompt(e, recalled_only(a.request), a.results)
                                                        for e in evidence)
                if a.question.superseded and mode != "off":
                    old = all(in_prompt(texts[e], a.request, a.results) for e in a.question.superseded)
                    t.stale_in[mode] += old and not found
                    t.both_in[mode] += old and found
    return tallies


def by_language(played: Sequence[Played], counter: TiktokenCounter) -> dict[str, tuple[int, int]]:
    """Answerable questions whose evidence the recalled prompt holds, and answerable questions, by language."""
    out: dict[str, tuple[int, int]] = {}
    for p in played:
        t = score([p], counter)
        f, n = out.get(p.chat.language, (0, 0))
        found = sum(x.found["tool"] for k, x in t.items() if k != "unanswerable")
        out[p.chat.language] = (f + found, n + sum(x.questions for k, x in t.items() if k != "unanswerable"))
    return out


def requests_with_recall(p: Played, mode: str) -> list[ModelRequest]:
    """The turns' requests as the model would receive them in ``mode``: the tool's schema offered in every request
    and a second request after each search; or the auto block after the history of each player's turn."""
    if mode == "off":
        return p.requests
    out: list[ModelRequest] = []
    for i, r in enumerate(p.requests):
        if mode == "auto":
            block = p.auto_blocks.get(i)
            after = "\n\n".join(x for x in (r.after_history, block) if x) or None
            out.append(replace(r, after_history=after))
            continue
        r = replace(r, tools=(*r.tools, SEARCH_TOOL))
        out.append(r)
        if i in p.tool_turns:
            query, results = p.tool_turns[i]
            out.append(replace(r, messages=(*r.messages, *tool_exchange(query, results))))
    return out


def prefix_tokens(requests: Sequence[ModelRequest]) -> tuple[int, int]:
    """Prompt tokens of the requests (as OpenAI reads them) and those that are a prefix of the request before."""
    previous: list[list[int]] = []
    tokens = shared = 0
    for r in requests:
        pieces = openai_pieces(r)
        tokens += sum(len(x) for x in pieces)
        shared += common_prefix(previous, pieces)
        previous = pieces
    return tokens, shared


def report(played: Sequence[Played], modes: Sequence[str], counter: TiktokenCounter, recall_tokens: int,
           seconds: float) -> None:
    turns = sum(p.turns for p in played)
    sessions = [max(t.session for t in p.chat.turns) + 1 for p in played]
    print(f"{len(played)} conversations ({', '.join(p.chat.language for p in played)}), {min(sessions)}-{max(sessions)} "
          f"sessions, {turns:,} inputs ({turns // len(played)} a conversation), "
          f"{sum(len(p.asked) for p in played)} questions; default policy, "
          f"{sum(p.summaries for p in played)} summaries; played in {seconds:.0f} s")
    if any(m != "off" for m in modes):
        print(f"recall: EMULATED archive (--emulate: the service writes none; what left the state "
              f"between turns, {sum(p.archived for p in played):,} messages; search budget {recall_tokens} tokens")
    mismatched = sum(p.mismatched for p in played)
    if mismatched:
        print(f"warning: {mismatched} stored messages differ from the generator's text")
    tallies = score(played, counter)
    head = "".join(f" {'in prompt ' + m:>16}" for m in modes) + "".join(f" {'tokens ' + m:>12}" for m in modes)
    print(f"{'kind':<13} {'questions':>9}{head}   (tokens: the prompt's / the whole conversation's)")
    total = Tally()
    for kind, t in tallies.items():
        total.questions += t.questions
        total.whole += t.whole
        for m in MODES:
            total.found[m] += t.found[m]
            total.tokens[m] += t.tokens[m]
            total.dated[m] += t.dated[m]
        _row(kind, t, modes)
    answerable = Tally(questions=total.questions - tallies["unanswerable"].questions,
                       whole=total.whole - tallies["unanswerable"].whole,
                       found={m: total.found[m] - tallies["unanswerable"].found[m] for m in MODES},
                       tokens={m: total.tokens[m] - tallies["unanswerable"].tokens[m] for m in MODES})
    _row("answerable", answerable, modes)
    updated = tallies["updated"]
    if updated.questions and any(m != "off" for m in modes):
        print(f"updated facts with recall: the earlier value without the latest {updated.stale}/{updated.questions}, "
              f"both {updated.both}/{updated.questions} (the model must tell the newer by its time)")
    temporal = tallies["temporal"]
    if temporal.questions and any(m != "off" for m in modes):
        print(f"temporal questions whose evidence the prompt shows with its date (recalled messages carry it; the "
              f"history's do not): {temporal.dated['tool']}/{temporal.questions}")
    if any(m != "off" for m in modes):
        print("answerable questions with their evidence recalled, by the player's language: " + ", ".join(
            f"{lang} {f}/{n}" for lang, (f, n) in sorted(by_language(played, counter).items())))
    per_turn = sum(p.store_bytes for p in played) / turns
    archive = sum(p.archive_bytes for p in played) / turns
    for m in modes:
        counts = [prefix_tokens(requests_with_recall(p, m)) for p in played]
        tokens, shared = sum(c[0] for c in counts), sum(c[1] for c in counts)
        line = (f"recall {m:<4}: cached prefix {shared / tokens:.1%} of prompt tokens, {shared / turns:,.0f} cached "
                f"tokens per input (of {tokens / turns:,.0f})")
        if m == "off":
            line += f"; bytes the store received per input {per_turn:,.0f}"
        else:
            line += (f"; bytes per input {per_turn + archive:,.0f} ({(per_turn + archive) / per_turn:.2f}x: the "
                     f"store's {per_turn:,.0f} + the archive's batches and index segments {archive:,.0f})")
        print(line)


def report_real(runs: Mapping[str, Sequence[Played]], recall_tokens: int, seconds: float, policy: str) -> None:
    """The service's own recall, one run per mode (the same conversations)."""
    played = next(iter(runs.values()))
    modes = list(runs)
    turns = sum(p.turns for p in played)
    sessions = [max(t.session for t in p.chat.turns) + 1 for p in played]
    print(f"{len(played)} conversations ({', '.join(p.chat.language for p in played)}), {min(sessions)}-{max(sessions)} "
          f"sessions, {turns:,} inputs ({turns // len(played)} a conversation), "
          f"{sum(len(p.asked) for p in played)} questions; {policy}; played in {seconds:.0f} s")
    print("recall: the service's archive (the commits' recall and recall_index keys, state format 6), one run per "
          "mode (PARLEY_RECALL); archived messages " + ", ".join(
              f"{m} {sum(p.archived for p in runs[m]):,}" for m in modes) + f"; search budget {recall_tokens} tokens")
    mismatched = sum(p.mismatched for ps in runs.values() for p in ps)
    if mismatched:
        print(f"warning: {mismatched} stored messages differ from the generator's text")
    tallies = score_real(runs)
    head = "".join(f" {'in prompt ' + m:>16}" for m in modes) + "".join(f" {'tokens ' + m:>12}" for m in modes)
    print(f"{'kind':<13} {'questions':>9}{head}   (tokens: the prompt's / the whole conversation's)")
    answerable = Tally()
    for kind, t in tallies.items():
        _row(kind, t, modes)
        if kind != "unanswerable":
            answerable.questions += t.questions
            answerable.whole += t.whole
            for m in modes:
                answerable.found[m] += t.found[m]
                answerable.tokens[m] += t.tokens[m]
    _row("answerable", answerable, modes)
    recalling = [m for m in modes if m != "off"]
    updated, temporal = tallies["updated"], tallies["temporal"]
    for m in recalling:
        print(f"recall {m}: updated facts, the earlier value without the latest {updated.stale_in[m]}/"
              f"{updated.questions}, both {updated.both_in[m]}/{updated.questions}; temporal questions whose evidence "
              f"recall shows with its date {temporal.dated[m]}/{temporal.questions}; answerable with their evidence "
              "in the prompt by language: " + ", ".join(
                  f"{lang} {f}/{n}" for lang, (f, n) in sorted(real_by_language(runs[m]).items())))
    for m in modes:
        tokens, shared = (sum(x) for x in zip(*(prefix_tokens(p.requests) for p in runs[m]), strict=True))
        net = sum(p.store_bytes for p in runs[m]) / turns
        line = (f"recall {m:<4}: cached prefix {shared / tokens:.1%} of prompt tokens, {shared / turns:,.0f} cached "
                f"tokens per input (of {tokens / turns:,.0f}); bytes the store received per input {net:,.0f}")
        if m != "off":
            sizes = {k: [p.keys[k] for p in runs[m]] for k in ("recall", "recall_index")}
            line += "; " + ", ".join(
                f"{k} {sum(x[0] for x in v) / turns:,.0f} B per input ({sum(x[2] for x in v) / len(v):,.0f} items, "
                f"MEMORY USAGE {sum(x[1] for x in v) / len(v) / 1024:,.0f} KiB a conversation)"
                for k, v in sizes.items())
        print(line)


def real_by_language(played: Sequence[Played]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for p in played:
        t = score_real({p.mode or "off": [p]})
        f, n = out.get(p.chat.language, (0, 0))
        mode = p.mode or "off"
        out[p.chat.language] = (f + sum(x.found[mode] for k, x in t.items() if k != "unanswerable"),
                                n + sum(x.questions for k, x in t.items() if k != "unanswerable"))
    return out


def _row(kind: str, t: Tally, modes: Sequence[str]) -> None:
    if not t.questions:
        return
    cells = "".join(f" {t.found[m] / t.questions:>16.0%}" for m in modes)
    cells += "".join(f" {t.tokens[m] / max(1, t.whole):>12.1%}" for m in modes)
    if kind == "unanswerable":
        cells = "".join(f" {'-':>16}" for _ in modes) + "".join(f" {t.tokens[m] / max(1, t.whole):>12.1%}" for m in modes)
    print(f"{kind:<13} {t.questions:>9}{cells}")


GRID: tuple[dict[str, Any], ...] = (
    {}, {"compaction_keep_last": 4}, {"compaction_keep_last": 6},
    {"compaction_high_water": 2160}, {"compaction_keep_last": 4, "compaction_high_water": 2160},
    {"compaction_keep_last": 6, "compaction_high_water": 2160},
    {"compaction_max_tokens": 4000}, {"compaction_max_tokens": 8000},
)


def policy_name(policy: Mapping[str, Any]) -> str:
    if not policy:
        return "default policy"
    return ", ".join(f"{k.removeprefix('compaction_')}={v}" for k, v in policy.items())


def play_all(url: str, chats: Sequence[GameChat], mode: str | None, recall_tokens: int,
             policy: Mapping[str, Any]) -> list[Played]:
    player = Player(url, recall_tokens, auto=mode is None, mode=mode, policy=policy)
    return [player.play(chat) for chat in chats]


def grid(url: str, chats: Sequence[GameChat], recall_tokens: int, policies: Sequence[Mapping[str, Any]]) -> None:
    """The compaction policy's settings against what the model can answer from, with recall (the tool) on."""
    print(f"{len(chats)} conversations, recall tool, search budget {recall_tokens} tokens; evidence: answerable "
          "questions whose evidence is in the prompt (with the search's results / in the history alone); tokens: the "
          "question's prompt against the whole conversation, and per input over every turn; cached: the share of "
          "prompt tokens that are a prefix of the request before")
    print(f"{'policy':<34} {'evidence':>9} {'history':>8} {'q tokens':>9} {'tokens/input':>13} {'cached':>7} "
          f"{'cached/input':>13} {'summaries':>10}")
    for policy in policies:
        played = play_all(url, chats, "tool", recall_tokens, policy)
        texts = {p.chat.conversation_id: p.chat.texts() for p in played}
        asked = [(p, a) for p in played for a in p.asked if a.question.kind != "unanswerable"]
        counter = TiktokenCounter(model="gpt-4o-mini")
        found = sum(all(in_prompt(texts[p.chat.conversation_id][e], a.request, a.results) for e in a.question.evidence)
                    for p, a in asked)
        history = sum(all(in_prompt(texts[p.chat.conversation_id][e], a.request) for e in a.question.evidence)
                      for p, a in asked)
        share = sum(prompt_tokens(counter, a.request) for _, a in asked) / sum(a.whole_tokens for _, a in asked)
        tokens, shared = (sum(x) for x in zip(*(prefix_tokens(p.requests) for p in played), strict=True))
        turns = sum(p.turns for p in played)
        print(f"{policy_name(policy):<34} {found / len(asked):>9.0%} {history / len(asked):>8.0%} {share:>9.1%} "
              f"{tokens / turns:>13,.0f} {shared / tokens:>7.1%} {shared / turns:>13,.0f} "
              f"{sum(p.summaries for p in played) / len(played):>10.1f}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=24)
    parser.add_argument("--seed", type=int, default=1, help="the first conversation's seed (the others follow)")
    parser.add_argument("--recall", choices=(*MODES, "all"), default="all")
    parser.add_argument("--recall-max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                        help="PARLEY_RECALL_MAX_TOKENS: the search's token budget")
    parser.add_argument("--keep-last", type=int, help="PARLEY_COMPACTION_KEEP_LAST")
    parser.add_argument("--high-water", type=int, help="PARLEY_COMPACTION_HIGH_WATER")
    parser.add_argument("--max-tokens", type=int, help="PARLEY_COMPACTION_MAX_TOKENS")
    parser.add_argument("--grid", action="store_true",
                        help="the compaction policy's settings in a small grid, recall tool on, one row each")
    parser.add_argument("--emulate", action="store_true", help="the service writes no archive; the bench emulates it "
                        "from what leaves the state (the measure from before the write path, to compare)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: two conversations (the grid: two policies)")
    args = parser.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.ERROR)
    modes = MODES if args.recall == "all" else ("off",) if args.recall == "off" else ("off", args.recall)
    policy = {k: v for k, v in (("compaction_keep_last", args.keep_last), ("compaction_high_water", args.high_water),
                                ("compaction_max_tokens", args.max_tokens)) if v is not None}
    chats = [conversation(args.seed + i) for i in range(2 if args.quick else args.conversations)]
    server = start_redis()
    started = time.perf_counter()
    try:
        if args.grid:
            grid(server.url, chats, args.recall_max_tokens, GRID[:2] if args.quick else GRID)
            return
        if args.emulate:
            played = play_all(server.url, chats, None, args.recall_max_tokens, policy)
        else:
            runs = {m: play_all(server.url, chats, m, args.recall_max_tokens, policy) for m in modes}
    finally:
        server.stop()
    seconds = time.perf_counter() - started
    if args.emulate:
        report(played, modes, TiktokenCounter(model="gpt-4o-mini"), args.recall_max_tokens, seconds)
    else:
        report_real(runs, args.recall_max_tokens, seconds, policy_name(policy))


if __name__ == "__main__":
    main()
