"""Running a turn of :class:`~worker.conversation.chat.Chat`: the player's turn (with its resets) and the turn that
answers a game event, each through one :class:`~worker.conversation.loop.ToolLoop` built for it, and the state it
writes. Every message a turn adds without a time of its own is given the turn's (its clock's ``now``). A base class of
``Chat`` (over :class:`~worker.conversation.chat_state.ChatState`), as that one is."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from worker.conversation import messages as msgs
from worker.conversation.chat_state import ChatState, State
from worker.conversation.facts import check_key
from worker.conversation.history import CleanPrefix, repair_from, repair_history
from worker.conversation.inspect import reply_mark
from worker.conversation.loop import LoopOutcome, ToolChoice, ToolLoop
from worker.conversation.messages import Message
from worker.conversation.model import Attachment, ModelRequest, ModelResponse
from worker.conversation.observe import complete_observed
from worker.conversation.prompt import FactPlacement, render_after_history, render_preamble, stable_chars
from worker.conversation.recall.archive import Archive
from worker.conversation.recall.leaving import departed
from worker.conversation.recall.reading import auto_quote, reading_of, search_tool
from worker.conversation.resets import fresh_after_idle, is_idle, reset_phrase_at
from worker.conversation.results import TurnResult
from worker.conversation.state import ConversationState, Memo
from worker.conversation.tokens import CountedPrefix
from worker.conversation.tools import Tool, check_tools, turn_conversation_id, without_lone_surrogates
from worker.conversation.turn_inputs import (
    check_after_history,
    check_attachments,
    check_text,
    check_utf8,
    split_leading_system,
    user_message,
)
from worker.conversation.turn_journal import NoJournal, TurnJournal
from worker.errors import StateDecodeError


@dataclass
class _Checked:
    """The longest history of this turn known valid (see :class:`~worker.conversation.history.CleanPrefix`):
    each request checks only what was added since, and the turn hands it on with the state it writes."""

    clean: CleanPrefix | None


class ChatTurn(ChatState):
    """The turns of :class:`~worker.conversation.chat.Chat`."""

    # The chat's fields (and what ``__post_init__`` derives from them) these bodies read.
    idle_gap_seconds: float | None
    reset_reply: str
    fallback_reply: str
    tool_source: Callable[[], Sequence[Tool]] | None
    max_tool_iterations: int
    max_reply_parts: int
    max_tool_result_chars: int
    tool_timeout: float
    max_tokens: int | None
    temperature: float | None
    facts_placement: FactPlacement
    archive: Archive | None
    conversation_id: str
    _tools: dict[str, Tool]
    _phrases: set[str]

    def _user_turn(self, state: State, *, system: str | None, user: str | Message,
                   messages: Sequence[Message | dict[str, Any]], lifecycle: bool, journal: TurnJournal | None,
                   attachments: Mapping[str, Attachment] | None, tools: Sequence[Tool],
                   after_history: Sequence[str]) -> TurnResult:
        check_utf8("the system prompt", system)
        check_after_history(after_history)
        turn_user = user_message(user, self.max_input_chars)
        files = check_attachments(attachments or {})
        extra_preamble, added = split_leading_system(messages, self.max_input_chars)
        now = self.clock()
        loaded = self.load(state)
        st = loaded.state
        reset = "idle_gap" if lifecycle and loaded.problem is None and state and is_idle(st, now, self.idle_gap_seconds) else None
        phrase_at = reset_phrase_at([*added, turn_user], self._phrases) if lifecycle else None
        if phrase_at is not None:
            reset = "phrase"
        if reset == "idle_gap":
            st = fresh_after_idle(st, self.provider, now)
        elif reset is not None:
            st = ConversationState.fresh(self.provider, now=now)
        if phrase_at == len(added):  # the turn ends on the phrase: nothing after it for the model to answer
            encoded = self._encode(st)
            return TurnResult(reply=self.reset_reply, state=encoded.blob, reset=reset,
                              state_problem=loaded.problem, resident=encoded.resident)
        if phrase_at is not None:  # what came after the phrase opens the new conversation; the model answers it
            added = added[phrase_at + 1:]
        checked = _Checked(None if reset else loaded.clean)
        said = [m.content for m in [*added, turn_user] if m.role == "user" and m.content]
        loop = self._tool_loop(system, extra_preamble, journal or NoJournal(), files, checked, tools, after_history,
                               said, self._write_time(now))
        out = loop.run(st.append(*self._timed([*added, turn_user]), at=loop.at))
        out.state = out.state.with_meta(out.state.meta.after_turn(now))
        # A reset phrase erases the archive: what it leaves behind is not archived.
        before = None if reset == "phrase" else loaded.state
        return self._finish_turn(out, loaded.problem, reset, None if reset else loaded.memo, checked.clean,
                                 None if reset else loaded.counted, before)

    def _event_turn(self, state: State, text: str, *, system: str | None, key: str | None, pinned: bool,
                    journal: TurnJournal | None, tools: Sequence[Tool], after_history: Sequence[str]) -> TurnResult:
        check_utf8("the system prompt", system)
        check_after_history(after_history)
        check_text("event text", text, self.max_input_chars)
        loaded = self.load(state)
        st = loaded.state if key is None else loaded.state.with_fact(check_key(key), text)
        at = self._write_time(self.clock())
        st = st.append(msgs.event(text, pinned=pinned and key is None), at=at)
        st = st.with_meta(replace(st.meta, events=st.meta.events + 1))
        checked = _Checked(loaded.clean)
        out = self._tool_loop(system, (), journal or NoJournal(), {}, checked, tools, after_history, [text],
                              at).run(st)
        return self._finish_turn(out, loaded.problem, None, loaded.memo, checked.clean, loaded.counted, loaded.state)

    def _call(self, request: ModelRequest) -> ModelResponse:
        return _encodable(complete_observed(self.model, request, self.observer))

    def _finish_turn(self, out: LoopOutcome, problem: StateDecodeError | None, reset: str | None,
                     memo: Memo | None, clean: CleanPrefix | None, counted: CountedPrefix | None,
                     before: ConversationState | None) -> TurnResult:
        """``before``: the state the turn began from (None: nothing of it is archived, as after a reset phrase)."""
        st, needs, counted = self._auto_compact_if_due(out.state, counted)
        encoded = self._encode(st, memo, clean, counted)
        written = encoded.resident.state if encoded.resident is not None else st
        return TurnResult(reply=out.reply, state=encoded.blob, finish_reason=out.finish_reason,
                          truncated=out.truncated, filtered=out.filtered, tool_limit_hit=out.tool_limit_hit,
                          state_problem=problem, reset=reset, needs_compaction=needs, usage=st.last_usage,
                          model_calls=out.model_calls, tool_calls=out.tool_calls,
                          replayed_rounds=out.replayed_rounds, replayed_results=out.replayed_results,
                          pinned_dropped=encoded.pinned_dropped, resident=encoded.resident, parts=tuple(out.parts),
                          reply_at=reply_mark(encoded.resident.state)
                          if out.reply and encoded.resident is not None else None,
                          departed=() if before is None else departed(before, written))

    def _tool_loop(self, system: str | None, extra: Sequence[str], journal: TurnJournal,
                   attachments: Mapping[str, Attachment], checked: _Checked | None = None,
                   own: Sequence[Tool] = (), after: Sequence[str] = (), said: Sequence[str] = (),
                   at: datetime | None = None) -> ToolLoop:
        """The tool loop of one turn: the chat's fixed tools plus, for this turn only, those its ``tool_source``
        offers now and the turn's ``own`` (which take the place of any of the same name); each request built from
        the state as the loop has it, with the turn's attachments (a round after a tool call still shows the model
        the photo it is answering). With an archive, the recall tool (unless a tool of that name is offered) and
        the past conversation quoted for the turn's input ``said``, searched once, before the first request."""
        tools = self._tools if self.tool_source is None else check_tools([*self._tools.values(), *self.tool_source()])
        if own:
            tools = {**tools, **check_tools(list(own))}
        recall = reading_of(self.archive, self.provider)
        recalled = None
        if recall is not None:
            # The worker names the turn's conversation (turn_context); a library caller names it on the chat, the
            # conversation its archive appends under.
            conversation_id = turn_conversation_id() or self.conversation_id
            recalled = auto_quote(recall, conversation_id, said, self.counter)
            if recall.mode in ("tool", "both"):
                tool = search_tool(recall, recall.max_tokens, conversation_id)
                tools = tools if tool.name in tools else {**tools, tool.name: tool}

        stable = stable_chars(system, extra)

        def request_for(st: ConversationState, tool_choice: ToolChoice) -> ModelRequest:
            if checked is None:
                history, _ = repair_history(st.messages)
            else:
                history, _, clean = repair_from(st.messages, checked.clean)
                checked.clean = clean or checked.clean
            return ModelRequest(system=render_preamble(system, st, extra, self.facts_placement), messages=history,
                                tools=[t.spec for t in tools.values()], max_tokens=self.max_tokens,
                                temperature=self.temperature, tool_choice=tool_choice, attachments=attachments,
                                after_history=render_after_history(st, after, self.facts_placement),
                                system_stable=stable, recalled=recalled)

        return ToolLoop(call=self._call, request_for=request_for, tools=tools,
                        max_tool_iterations=self.max_tool_iterations, fallback_reply=self.fallback_reply,
                        tool_timeout=self.tool_timeout, max_tool_result_chars=self.max_tool_result_chars,
                        journal=journal, max_reply_parts=self.max_reply_parts, at=at)


def _encodable(response: ModelResponse) -> ModelResponse:
    """The reply with any lone surrogate a provider's JSON escaped replaced by U+FFFD (the model's text is not the
    caller's input to refuse): the state it joins can be encoded."""
    message = response.message
    content, raw = without_lone_surrogates(message.content), without_lone_surrogates(message.raw)
    calls = tuple(msgs.ToolCall(c.id, without_lone_surrogates(c.name), without_lone_surrogates(c.arguments))
                  for c in message.tool_calls)
    if content is message.content and raw is message.raw and all(
            a.name is b.name and a.arguments is b.arguments for a, b in zip(calls, message.tool_calls, strict=True)):
        return response
    return replace(response, message=replace(message, content=content, tool_calls=calls, raw=raw))
