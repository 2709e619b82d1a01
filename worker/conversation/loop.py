"""The tool loop of one turn: call the model, run the tools it asks for, repeat until it answers in text.

:class:`~worker.conversation.chat.Chat` builds one :class:`ToolLoop` per turn; the loop itself knows
nothing of observers, lifecycle or compaction. With a :class:`~worker.conversation.turn_journal.TurnJournal` the loop
records each model round that asked for tools and each tool result before the model sees it, and a retried turn
replays what was recorded instead of calling the model or the tools again (see :mod:`worker.conversation.turn_journal`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from worker.conversation.messages import Message, ToolCall
from worker.conversation.model import FinishReason, ModelRequest, ModelResponse
from worker.conversation.state import ConversationState
from worker.conversation.tools import Tool, run_tool
from worker.conversation.turn_journal import NoJournal, TurnJournal
from worker.envelopes.reply_parts import out_part, render_all

ToolChoice = Literal["auto", "none"]

#: The most parts one reply holds unless the chat says otherwise: each part a tool adds, each text the model wrote
#: beside calls that added parts, and the final text count one (a long text once, before it is split into messages).
#: Every part is a message of its own on the player's phone: a model steered into "spam me" stops here.
DEFAULT_MAX_REPLY_PARTS = 10

#: What the model reads for a call whose parts would take the reply past its cap.
REPLY_FULL = ("Error: your reply is full: it holds at most {limit} parts, your final text counting one, and {held} "
              "are in it, so the {count} part(s) this call returned were not added and will not be sent. Whatever "
              "else the call did stands. Add no more parts; say what is left in your final text.")


@dataclass(slots=True)
class LoopOutcome:
    """What the loop produced; the counters and flags feed :class:`~worker.conversation.results.TurnResult`."""

    reply: str
    state: ConversationState
    # What tools added to the reply before its final text, in order: a text the model wrote beside the calls that
    # added parts (a str), then those parts (their JSON form).
    parts: list[str | dict[str, Any]] = field(default_factory=list)
    finish_reason: FinishReason = "stop"
    model_calls: int = 0
    tool_calls: int = 0
    truncated: bool = False
    filtered: bool = False
    tool_limit_hit: bool = False
    replayed_rounds: int = 0  # model rounds taken from the journal instead of calling the model
    replayed_results: int = 0  # tool results taken from the journal instead of calling the tool


def _without_facts(result: Message) -> Message:
    return replace(result, facts=(), reply_parts=()) if result.facts or result.reply_parts else result


def _added_parts(message: Message, results: Sequence[Message]) -> list[str | dict[str, Any]]:
    """What one round of tools added to the reply: nothing unless a result carried parts; then the text the model
    wrote beside its calls (it comes first, as the model wrote it), then the parts in call order."""
    parts: list[str | dict[str, Any]] = [p for r in results for p in r.reply_parts]
    if parts and message.content.strip():
        parts.insert(0, message.content.strip())
    return parts


@dataclass(slots=True)
class _ReplyRoom:
    """The parts a reply holds as one round's calls add theirs: ``beside`` (1 when the model wrote text beside the
    round's calls) joins the reply with the round's first part, as :func:`_added_parts` puts it there."""

    held: int
    beside: int
    opened: bool = False

    def take(self, count: int, limit: int) -> bool:
        """Add ``count`` parts when the reply stays within ``limit``; whether they were added."""
        if count and self.held + count + (0 if self.opened else self.beside) > limit:
            return False
        self.add(count)
        return True

    def add(self, count: int) -> None:
        """Add ``count`` parts whatever the limit (a recorded result: the first run decided)."""
        if count:
            self.held, self.opened = self.held + count + (0 if self.opened else self.beside), True


def with_tool_facts(st: ConversationState, results: Sequence[Message]) -> ConversationState:
    """``st`` with the facts game tools' ``results`` set, in call order (a later one with the same key wins)."""
    for result in results:
        for key, text in result.facts:
            st = st.with_fact(key, text)
    return st


#: What the model reads for a call of a tool that is not idempotent when the call may already have run.
UNKNOWN_OUTCOME = ("Error: the call to {name} may or may not have been carried out (the worker stopped while it ran) "
                   "and was not repeated, because {name} is not idempotent. Its outcome is unknown.")


@dataclass(frozen=True, slots=True)
class ToolLoop:
    """``call`` makes one (observed) model call; ``request_for`` builds the request for a state."""

    call: Callable[[ModelRequest], ModelResponse]
    request_for: Callable[[ConversationState, ToolChoice], ModelRequest]
    tools: dict[str, Tool]
    max_tool_iterations: int
    fallback_reply: str
    tool_timeout: float
    max_tool_result_chars: int
    journal: TurnJournal = field(default_factory=NoJournal)
    max_reply_parts: int = DEFAULT_MAX_REPLY_PARTS
    at: datetime | None = None  # the time the messages the loop adds are given (None: a format without times)

    def run(self, st: ConversationState) -> LoopOutcome:
        """Loop until the model answers in text; after ``max_tool_iterations`` rounds of tools, ask once
        more with ``tool_choice="none"``. Recorded rounds are replayed first, then the loop goes on live."""
        out = LoopOutcome(reply="", state=st)
        rounds = 0
        tool_choice: ToolChoice = "auto"
        replay, recorded = self.journal.recorded_rounds(), self.journal.recorded_results()
        step = 0
        while True:
            seen = st.last_seq
            response = self._respond(step, replay, st, tool_choice, out)
            out.finish_reason = response.finish_reason
            if response.usage is not None:
                st = st.with_usage(response.usage, seen)
            final = self._final(response, tool_choice, out)
            if final is not None:
                out.reply, out.state = final[0], st.append(final[1], at=self.at)
                return out
            message = response.message
            if step >= len(replay):
                self.journal.record_round(step, response)  # before any of its tools runs
            room = _ReplyRoom(held=len(out.parts), beside=1 if message.content.strip() else 0)
            results = [self._result(step, call, recorded, out, room, replayed=step < len(replay))
                       for call in message.tool_calls]
            st = with_tool_facts(st.append(message, *(_without_facts(r) for r in results), at=self.at), results)
            out.parts += _added_parts(message, results)
            step += 1
            rounds += 1
            if rounds >= self.max_tool_iterations:
                out.tool_limit_hit = True
                tool_choice = "none"

    def _respond(self, step: int, replay: Sequence[ModelResponse], st: ConversationState, tool_choice: ToolChoice,
                 out: LoopOutcome) -> ModelResponse:
        """The recorded round ``step`` when there is one (no model call), else a live model call."""
        if step < len(replay):
            out.replayed_rounds += 1
            return replay[step]
        response = self.call(self.request_for(st, tool_choice))
        out.model_calls += 1
        return response

    def _result(self, step: int, call: ToolCall, recorded: Mapping[tuple[int, str], Message],
                out: LoopOutcome, room: _ReplyRoom, *, replayed: bool) -> Message:
        """The recorded result of ``call`` when there is one (the tool is not called again), else run the tool
        and record its result before the model sees it. In a ``replayed`` round a call without a recorded result
        may already have run (the worker died inside it): a tool that is not idempotent is not called again.
        Parts that would take the reply past ``max_reply_parts`` (one kept for the final text) are not added: the
        model reads an error result instead, recorded as it is, so a replay adds what the first run added."""
        result = recorded.get((step, call.id))
        if result is not None:
            out.replayed_results += 1
            room.add(len(result.reply_parts))
            return result
        tool = self.tools.get(call.name)
        if replayed and tool is not None and not tool.idempotent:
            result = Message(role="tool", content=UNKNOWN_OUTCOME.format(name=call.name), tool_call_id=call.id,
                             name=call.name, is_error=True)
            self.journal.record_result(step, result)
            return result
        result = run_tool(self.tools, call, default_timeout=self.tool_timeout, max_chars=self.max_tool_result_chars)
        out.tool_calls += 1
        if not room.take(len(result.reply_parts), self.max_reply_parts - 1):
            result = replace(result, is_error=True, reply_parts=(), content=REPLY_FULL.format(
                limit=self.max_reply_parts, held=room.held, count=len(result.reply_parts)))
        self.journal.record_result(step, result)
        return result

    def _final(self, response: ModelResponse, tool_choice: ToolChoice,
               out: LoopOutcome) -> tuple[str, Message] | None:
        """The reply and the message to store when ``response`` ends the turn; ``None`` to run its tools."""
        message = response.message
        text = message.content.strip()
        if response.finish_reason in ("content_filter", "refusal"):
            out.filtered = True
            reply = text or self.fallback_reply
            return reply, Message(role="assistant", content=reply)
        if response.finish_reason == "length":
            out.truncated = True
            reply = text or "(The answer was cut short.)"
            # A truncated tool call cannot be trusted: keep only the text.
            return reply, (message if not message.tool_calls and text else Message(role="assistant", content=reply))
        if message.tool_calls and tool_choice == "none":
            # The model asked for tools after being told not to: answer with what text there is.
            reply = text or self.fallback_reply
            return reply, Message(role="assistant", content=reply)
        if not message.tool_calls and not text and out.parts:
            # The tools' parts are the answer: no fallback text after them. The state keeps them as text.
            return "", Message(role="assistant", content=render_all([out_part(p) for p in out.parts]))
        if not message.tool_calls:
            reply = text or self.fallback_reply
            return reply, (message if text else replace(message, content=reply, raw=None))
        return None
