"""A person takes a conversation over: what the drain makes of a paused turn and of an operator's message.

While a conversation is paused (:class:`~worker.store.pauses.PauseStore`), a turn that would ask the model is
:class:`~worker.service.drain.outcomes.Withheld` instead (the pause hook, :mod:`~worker.service.drain.hooks.handoff`,
decides at the turn point, so every model turn is covered: a chat message, a burst, an event the model would
answer): its inputs enter the state in order, the player's words as the player's and the game's events as events,
with no model call and no reply, not even a short notice (invariant 13's one exception: the person answers).

An operator's message (``ConversationClient.send_operator_message``, an ``operator`` input in the mailbox, so in
order with the others) is :class:`~worker.service.drain.outcomes.Spoken`: its text (then its parts) goes out through
the outbox like a reply (the same pacing, crash window, statuses, 24-hour window and template), and enters the state
as assistant messages named :data:`~worker.conversation.messages.OPERATOR`. A model reads them later as plain
assistant text, the conversation's own side, so it carries on from what the person said.
"""

from __future__ import annotations

from worker.channels.split import split_message
from worker.conversation import messages as msgs
from worker.conversation.chat import Chat, State
from worker.conversation.messages import MediaRef, Message
from worker.envelopes.inputs import Envelope, InputKind, ReplyRecord
from worker.envelopes.reply_parts import OutPart, render
from worker.observability import tracing
from worker.service.drain.outcomes import Spoken, Withheld, quarantine_of
from worker.service.drain.sent_times import as_sent


def _as_said(env: Envelope) -> Message:
    """What the state keeps of one input of a paused turn: a chat message as the player's (a photo by its
    reference: nothing is fetched), an event as the game's (or the player's, when they sent it)."""
    if env.kind is InputKind.EVENT:
        # A keyed event sets its fact (below) and is kept as a plain event, as an answered keyed event is.
        return as_sent(msgs.event(env.text or "", pinned=env.pinned and env.key is None,
                                  from_player=bool(env.from_player)), env)
    media = MediaRef(env.media.id, env.media.mime_type) if env.media is not None else None
    return as_sent(msgs.user(env.text or "", media=media), env)


def withhold(chat: Chat, state: State, paused: Withheld) -> Withheld:
    """``paused`` with the state its inputs make: added in order, no model call."""
    envs = [p.env for p in paused.inputs]
    result = chat.apply_messages(state, [_as_said(e) for e in envs],
                                 from_player=any(e.kind is InputKind.MESSAGE or e.from_player for e in envs),
                                 facts=[(e.key, e.text or "") for e in envs if e.kind is InputKind.EVENT and e.key is not None])
    return Withheld(paused.inputs, paused.until, result.state, result.resident,
                    quarantine_of(state, result.state_problem), result.needs_compaction, result.pinned_dropped,
                    result.departed)


def operator_texts(env: Envelope) -> list[OutPart]:
    """The operator's message as the messages it is sent as: its text, then each part."""
    return [env.text or "", *(env.parts or ())]


def speak(chat: Chat, state: State, env: Envelope, cid: str) -> Spoken:
    """The operator's message ``env``: the reply that sends it and the state that holds it."""
    texts = operator_texts(env)
    # The state holds what the player saw as text (every provider reads it); the outbox holds the parts themselves.
    result = chat.apply_messages(state, [msgs.operator(render(t)) for t in texts])
    record = ReplyRecord(reply_id=env.message_id, conversation_id=cid, recipient=env.recipient or cid,
                         parts=[p for t in texts for p in (split_message(t) if isinstance(t, str) else [t])],
                         reply_to=env.reply_to, traceparent=tracing.current())
    return Spoken(env, result.state, record, record.to_bytes(), result.resident,
                  quarantine_of(state, result.state_problem), result.needs_compaction, result.pinned_dropped,
                  result.departed)
