"""What the model still knows: long generated game conversations (bench/memory_chat.py) played through the worker's own
service with the default policy, then, for each later question, whether the messages that answer it are in the prompt
the model answers from, verbatim.

    python bench/memory.py [--conversations 24] [--seed 1] [--recall off|tool|auto|all] [--recall-max-tokens 1000]
                           [--quick]

Each conversation is played turn by turn through ``worker.runtime.build_service`` (the default settings: the default
compaction chain, its budget and high-water mark, the follow-up compaction spliced in order; a real redis-server of
the run's own, the store's Lua, the outbox delivered to a recording channel). The model is scripted: each turn's
answer is the guide's message the generator planned; the summariser writes a fixed-length gist that quotes no
message (a summary's paraphrase never counts as the evidence, so the scripted one does not pretend to keep any).

For each question (a player's message in a late session), the chat request the model received for that turn is the
prompt. A question counts when every one of its evidence messages' texts is in it verbatim: a message of the
history with that text, or the text inside the preamble or after the history (keyed facts).

Recall modes:

- ``off``: the prompt alone.
- ``tool``: the model calls ``search_conversation`` with the question: the archive's results (text and context) count
  as in the prompt; the prompt tokens are the request's plus the tool's schema, the call and its results.
- ``auto``: every player message's turn searches the archive with its text; the results go after the history; the
  prompt tokens include them.

The archive: the service does not write it on this branch yet, so it is emulated: every message that leaves the
state between two reads (a turn's commit, a compaction's splice) is appended to an ``InMemoryArchive`` with its
speaker and the time the generator gave it (what the write path is to do). The output says so.

Printed, per question kind: the questions, the share whose evidence is in the prompt (each mode), and the prompt's
tokens against the whole conversation's up to that question (the system prompt and every message so far, tiktoken
through worker/conversation/tokens.py); then, over every turn, the share of prompt tokens that are a prefix of the
previous request (bench/prompt_cache.py's measure) and the bytes the store received per turn (redis-server's
``total_net_input_bytes``), with recall on plus the archive's batches and index segments the write path would add
(the codec's zstd batches, one FTS5 segment per archiving commit).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid
from collections.abc import Sequence
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
from worker.conversation.recall.codec import encode_batch
from worker.conversation.recall.index import SearchIndex
from worker.conversation.scripted import ScriptedModel
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


def auto_block(results: Sequence[Recalled]) -> str:
    """The recalled messages as the auto mode's block after the history: one line each, its time and speaker."""
    lines = [AUTO_HEADING]
    for r in results:
        for m in (r, *r["context"]):
            lines.append(f"[{m['at'] or '?'}] {m['speaker']}: {m['text']}")
    return "\n".join(lines)


class Player:
    """Plays one conversation through the service, keeping the emulated archive in step with the state."""

    def __init__(self, redis_url: str, recall_tokens: int, auto: bool) -> None:
        self.settings = Settings(_env_file=None, redis_url=redis_url, key_prefix=f"m{uuid.uuid4().hex[:6]}",
                                 llm_provider="openai", openai_api_key="k", whatsapp_phone_number_id="1",
                                 whatsapp_access_token="t", burst_quiet_seconds=0, whatsapp_messages_per_second=0,
                                 whatsapp_recipient_per_minute=0)
        self.model = GuideModel(self.settings.llm.model or "gpt-4o-mini")
        self.wakes: list[tuple[str, str]] = []
        self.service = build_service(self.settings, self._wake, model=self.model, channel=RecordingChannel(), tools=[])
        self.client = ConversationClient(self.service.store, lambda cid: None)  # type: ignore[arg-type]
        self.redis = redis.Redis.from_url(redis_url)
        self.counter = TiktokenCounter(model=self.model.model_name)
        self.recall_tokens, self.auto = recall_tokens, auto

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
            self.client.send_message(cid, turn.text, message_id=turn.id)
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
    the history, or a recalled message's text."""
    if any(m.content == text for m in request.messages):
        return True
    if text in (request.system or "") or text in (request.after_history or ""):
        return True
    return any(text == m["text"] for r in results for m in (r, *r["context"]))


def prompt_tokens(counter: TiktokenCounter, request: ModelRequest) -> int:
    return (counter.count_text(request.system or "") + counter.count_messages(request.messages)
            + counter.count_text(request.after_history or ""))


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
        print(f"recall: EMULATED archive (the service does not write it on this branch yet): what left the state "
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


def _row(kind: str, t: Tally, modes: Sequence[str]) -> None:
    if not t.questions:
        return
    cells = "".join(f" {t.found[m] / t.questions:>16.0%}" for m in modes)
    cells += "".join(f" {t.tokens[m] / max(1, t.whole):>12.1%}" for m in modes)
    if kind == "unanswerable":
        cells = "".join(f" {'-':>16}" for _ in modes) + "".join(f" {t.tokens[m] / max(1, t.whole):>12.1%}" for m in modes)
    print(f"{kind:<13} {t.questions:>9}{cells}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=24)
    parser.add_argument("--seed", type=int, default=1, help="the first conversation's seed (the others follow)")
    parser.add_argument("--recall", choices=(*MODES, "all"), default="all")
    parser.add_argument("--recall-max-tokens", type=int, default=1000,
                        help="the search's token budget (PARLEY_RECALL_MAX_TOKENS once the setting lands)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: two conversations")
    args = parser.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.ERROR)
    modes = MODES if args.recall == "all" else ("off",) if args.recall == "off" else ("off", args.recall)
    chats = [conversation(args.seed + i) for i in range(2 if args.quick else args.conversations)]
    server = start_redis()
    started = time.perf_counter()
    try:
        player = Player(server.url, args.recall_max_tokens, auto="auto" in modes)
        played = [player.play(chat) for chat in chats]
    finally:
        server.stop()
    report(played, modes, player.counter, args.recall_max_tokens, time.perf_counter() - started)


if __name__ == "__main__":
    main()
