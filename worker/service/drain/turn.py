"""One chat turn under the drain's lease: the inputs it takes in (a burst) become the turn's messages, the model
answers, and the turn comes to an :class:`~worker.service.drain.outcomes.Answer` (or to the outcome a hook put in
its place: the budget's or a photo's short answer). The turn decides; the drainer commits.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from worker.channels.split import split_message
from worker.conversation import messages as msgs
from worker.conversation.chat import Chat, State, TurnResult
from worker.conversation.messages import Message
from worker.conversation.model import Attachment
from worker.conversation.tools import turn_context
from worker.envelopes.inputs import InputKind, ReplyRecord
from worker.envelopes.reply_parts import OutPart, out_part
from worker.observability import tracing
from worker.service.config import ServiceConfig
from worker.service.drain.burst import Pending, answers_event
from worker.service.drain.handoff import withhold
from worker.service.drain.hooks.base import Hooks
from worker.service.drain.media import MediaPreparer, Prepared
from worker.service.drain.outcomes import Answer, Outcome, Withheld, quarantine_of
from worker.service.drain.recovery import usage_trace
from worker.service.drain.run import DrainRun
from worker.service.drain.sent_times import as_sent
from worker.service.drain.stored_journal import StoreJournal
from worker.store.answers import Snapshot

# What the model reads for a photo that could not be loaded, when other messages of a burst carry the turn.
UNLOADED_PHOTO = "[The player sent a photo that could not be loaded]"


def reply_parts(result: TurnResult) -> list[OutPart]:
    """The turn's reply as the outbox keeps it: what its tools added (texts split into whole messages, parts as
    they are), then the model's text."""
    # An empty reply after parts adds nothing (split_message would make it an ellipsis, a reply never being empty).
    added = (*result.parts, result.reply) if result.reply or not result.parts else result.parts
    return [p for a in added for p in (split_message(a) if isinstance(a, str) else [out_part(a)])]


class TurnRunner:
    """Runs one turn of a drain: ``run(inputs, snap)`` -> its outcome."""

    def __init__(self, chat: Chat, config: ServiceConfig, media: MediaPreparer, hooks: Hooks, run: DrainRun,
                 journal: StoreJournal) -> None:
        self.chat, self.config, self.media, self.hooks = chat, config, media, hooks
        self.r, self.journal = run, journal
        self._prepared: dict[str, Prepared] = {}  # by input id: a merge does not fetch a photo again
        self._photos = media.turn_photos()  # the bytes of photos this turn may hold
        self._system: str | None = None  # what the hooks add to this turn's system prompt

    def run(self, inputs: tuple[Pending, ...], snap: Snapshot) -> Outcome:
        run = self.r
        started = time.perf_counter()
        state = run.state_of(snap)
        instead = self.hooks.before_turn(run, inputs, self._prepare)
        if isinstance(instead, Withheld):  # a person has taken over: the inputs join the state, no model call
            return withhold(self.chat, state, instead)
        if instead is not None:
            return instead
        self._system = self.hooks.system(run, inputs)  # the game's live context: once per turn, merges included
        with self.hooks.model_call(run, inputs):  # the typing indicator, when presence is on
            result, inputs, merges = self._answer(inputs, state)
        head, last = inputs[0], inputs[-1]
        record = ReplyRecord(reply_id=head.id, conversation_id=run.cid, recipient=last.env.recipient or run.cid,
                             parts=reply_parts(result), reply_to=last.env.reply_to, accepted_at=head.env.accepted_at,
                             traceparent=tracing.current())
        said = "event" if answers_event(inputs) else "user"  # an answered game event is not the player's words
        trace = turn_trace(result, said, last.env.text, self.config.trace_reply_chars, len(record.parts))
        if len(inputs) > 1:
            trace["burst"] = [p.id for p in inputs]
        if merges:
            trace["merges"] = merges
        trail = self.journal.trail
        trail.usage.add(result.usage)  # the final round (the journal saw only the rounds that called tools)
        return Answer(inputs, result, record, record.to_bytes(), trace, trail, started,
                      quarantine_of(state, result.state_problem))

    def _answer(self, inputs: tuple[Pending, ...], state: State) -> tuple[TurnResult, tuple[Pending, ...], int]:
        """The model's answer to ``inputs``, run again over the inputs a hook grows them to (a double-text merge)."""
        merges = 0
        while True:
            result = self._once(inputs, state)
            grown = self.hooks.again(self.r, inputs, result, merges, self.journal)
            if grown is None:
                return result, inputs, merges
            merges += 1
            inputs = grown

    def _once(self, inputs: tuple[Pending, ...], state: State) -> TurnResult:
        head, last = inputs[0], inputs[-1]
        numbers = self.config.numbers  # several business numbers: the conversation's own prompt and tools
        prompt = (numbers.system_prompt(self.r.cid) if numbers is not None else None) or self.config.system_prompt
        tools = numbers.tools_of(self.r.cid) if numbers is not None else ()
        event = answers_event(inputs)  # the game's event, answered with no player message
        system = prompt if event else last.env.system or head.env.system or prompt
        after: tuple[str, ...] = ()
        if self._system and self.config.game_context.placement == "after_history":
            after = (self._system,)  # after the history: the prompt's start stays the same, for the providers' caches
        elif self._system:  # the game's live context, in every turn the model answers
            system = f"{system}\n\n{self._system}" if system else self._system
        with turn_context(self.r.cid, head.id):
            if event:
                return self.chat.run_event_turn(state, head.env.text or "", system=system, key=head.env.key,
                                                pinned=head.env.pinned, journal=self.journal, tools=tools,
                                                after_history=after)
            new, attachments = self._messages(inputs)
            return self.chat.run_turn(state, system=system, messages=new[:-1], user=new[-1], journal=self.journal,
                                      attachments=attachments, tools=tools, after_history=after)

    def _messages(self, inputs: Sequence[Pending]) -> tuple[list[Message], dict[str, Attachment]]:
        """The turn's new messages in mailbox order (each chat message a user message, a photo with its picture
        when the model sees it; each event an event, or the player's words when the player sent it), and the
        pictures by media id."""
        out: list[Message] = []
        attachments: dict[str, Attachment] = {}
        for p in inputs:
            if p.env.kind is InputKind.EVENT:
                out.append(as_sent(msgs.event(p.env.text or "", pinned=p.env.pinned,
                                              from_player=bool(p.env.from_player)), p.env))
                continue
            prepared = self._prepare(p)
            out.append(as_sent(prepared.message if prepared.message is not None else msgs.user(UNLOADED_PHOTO), p.env))
            if prepared.attachment is not None:
                attachments[prepared.attachment[0]] = prepared.attachment[1]
        return out, attachments

    def _prepare(self, p: Pending) -> Prepared:
        if p.id not in self._prepared:
            self._prepared[p.id] = self.media.prepare(p.env, self._photos)
        return self._prepared[p.id]


def turn_trace(result: TurnResult, said: str, text: str | None, reply_chars: int, parts: int) -> dict[str, Any]:
    """A turn's trace entry. The texts stay in the state, which the entry references (``in_state``, found again by
    ``parley trace`` and ``parley show``): repeating them took more of Redis than the history itself. Only
    a reply the state does not hold (a reset phrase's) is written out. Fields at their usual value
    (:data:`worker.client.summary.TURN_USUAL`) are left out; the readers put them back."""
    trace: dict[str, Any] = usage_trace(result.usage)
    if result.finish_reason != "stop":
        trace["finish"] = result.finish_reason
    if result.model_calls != 1:
        trace["model_calls"] = result.model_calls
    if parts != 1:
        trace["parts"] = parts
    if result.reply_at is not None:
        trace["in_state"] = result.reply_at
    else:
        trace[said], trace["reply"] = text, result.reply[:reply_chars]
    if result.tool_calls:
        trace["tool_calls"] = result.tool_calls
    if result.replayed_rounds or result.replayed_results:
        trace["replayed"] = [result.replayed_rounds, result.replayed_results]
    if result.reset:
        trace["reset"] = result.reset
    return trace
