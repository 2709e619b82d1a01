"""What a conversation's state holds: :class:`ConversationState` (the history, the rolling summary, pinned items,
what the model has already seen, the last provider-reported usage, the keyed facts) and its :class:`Meta`. The
codec is :mod:`worker.conversation.state_encode` and :mod:`worker.conversation.state_decode`."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime

from worker.conversation.messages import Message
from worker.conversation.model import Usage


@dataclass(frozen=True, slots=True)
class Meta:
    """When the conversation started and how far it has got. ``epoch`` names one conversation's life:
    a reset starts a new epoch, so a compaction computed before the reset is never spliced after it."""

    epoch: str = ""
    started_at: float = 0.0
    last_activity: float = 0.0
    turns: int = 0
    events: int = 0
    compactions: int = 0

    def after_turn(self, now: float) -> Meta:
        """One more turn, the last activity at ``now`` (built directly, as :func:`_changed` is, and tested alike)."""
        return Meta(self.epoch, self.started_at, now, self.turns + 1, self.events, self.compactions)


@dataclass(frozen=True, slots=True)
class Fact:
    """A fact the game keeps current ("The player's target is Harrogate Theatre"): one per ``key``, the latest
    wins. Only the game sets one (an event sent with ``key``, or a game tool's answer): never a player's words."""

    key: str
    text: str


@dataclass(frozen=True, slots=True)
class ConversationState:
    """Everything Parley remembers of one conversation.

    - ``messages``: the history the model will read (no leading system prompt: that is given fresh).
    - ``summary``: the rolling summary of exchanges folded out of ``messages``; ``summary_seq`` is the
      highest ``seq`` folded into it.
    - ``pinned``: pinned items whose exchange was compacted away; rendered into the preamble.
    - ``next_seq``: the ``seq`` the next message gets. ``seen_seq``: the highest ``seq`` the model saw.
    - ``last_usage``: what the provider reported for the last round trip.
    - ``generation``: bumped by every compaction, so a stale compaction result is never spliced.
    - ``facts``: the keyed facts, oldest set first; outside the history, so no compaction touches them. Where the
      prompt shows them is ``Chat.facts_placement``'s choice (:mod:`worker.conversation.prompt`).
    - ``preamble_facts``: the facts as they were when the start of the prompt was last rewritten anyway (a
      compaction that changed the summary, the pinned items or the history's start; a fresh conversation): with
      the default placement the preamble shows these, and only the facts that changed since go after the history.
      Empty in a state from before version 5: every fact then counts as changed (all after the history).
    """

    provider: str
    messages: tuple[Message, ...] = ()
    summary: str = ""
    summary_seq: int = 0
    pinned: tuple[Message, ...] = ()
    next_seq: int = 1
    seen_seq: int = 0
    last_usage: Usage | None = None
    generation: int = 0
    meta: Meta = field(default_factory=Meta)
    facts: tuple[Fact, ...] = ()
    preamble_facts: tuple[Fact, ...] = ()

    @classmethod
    def fresh(cls, provider: str, *, now: float | None = None) -> ConversationState:
        started = time.time() if now is None else now
        return cls(provider=provider, meta=Meta(epoch=uuid.uuid4().hex[:16], started_at=started, last_activity=started))

    def append(self, *messages: Message, at: datetime | None = None) -> ConversationState:
        """A new state with ``messages`` appended, each given the next ``seq``, and ``at`` when it has no time."""
        seq = self.next_seq
        added = []
        for m in messages:
            added.append(m.with_seq(seq, at))
            seq += 1
        return _changed(self, self.messages + tuple(added), seq, self.seen_seq, self.last_usage, self.meta)

    def with_usage(self, usage: Usage, seen_seq: int) -> ConversationState:
        """A new state recording a round trip's reported ``usage`` and the highest ``seq`` its prompt held."""
        return _changed(self, self.messages, self.next_seq, seen_seq, usage, self.meta)

    def with_meta(self, meta: Meta) -> ConversationState:
        """A new state with ``meta`` in place of its metadata."""
        return _changed(self, self.messages, self.next_seq, self.seen_seq, self.last_usage, meta)

    def with_fact(self, key: str, text: str) -> ConversationState:
        """A new state where ``key`` holds ``text``: the fact with that key before is gone (latest wins) and the new
        one is the newest (the cap drops the oldest facts first)."""
        kept = tuple(f for f in self.facts if f.key != key)
        return ConversationState(self.provider, self.messages, self.summary, self.summary_seq, self.pinned,
                                 self.next_seq, self.seen_seq, self.last_usage, self.generation, self.meta,
                                 (*kept, Fact(key, text)), self.preamble_facts)

    @property
    def last_seq(self) -> int:
        return self.next_seq - 1


def _changed(state: ConversationState, messages: tuple[Message, ...], next_seq: int, seen_seq: int,
             last_usage: Usage | None, meta: Meta) -> ConversationState:
    """``state`` with the fields a turn changes replaced: what :func:`dataclasses.replace` does, built directly. A turn
    makes several new states and ``replace`` walks the fields' metadata each time (about twice the cost). Every
    field is passed, in order: tests/conversation/test_state_codec.py fails when a field is added and not here."""
    return ConversationState(state.provider, messages, state.summary, state.summary_seq, state.pinned, next_seq,
                             seen_seq, last_usage, state.generation, meta, state.facts, state.preamble_facts)
