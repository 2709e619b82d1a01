"""The state side of :class:`~worker.conversation.chat.Chat`: writing a state within its bounds, adding events and
messages with no model call, and compaction (the turn's own check and the worker's follow-up).

A base class of ``Chat`` rather than functions, so that these bodies read the chat's settings as ``self.*`` while
the public methods, with their documented signatures, stay on ``Chat`` itself and call in here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime

from worker.conversation import messages as msgs
from worker.conversation.bounded import Encoded, encode_bounded
from worker.conversation.compaction import Compactor, StepsOutcome, apply_compactor
from worker.conversation.facts import check_key
from worker.conversation.history import CleanPrefix
from worker.conversation.message_times import from_seconds, untimed
from worker.conversation.messages import Message
from worker.conversation.model import Model
from worker.conversation.observe import RoundTrip, UsageTally
from worker.conversation.prompt import prompt_tokens
from worker.conversation.recall.leaving import departed
from worker.conversation.resident import Resident
from worker.conversation.results import CompactionReport, EventResult
from worker.conversation.state import ConversationState, LoadResult, Memo
from worker.conversation.state_format import TIMES_VERSION
from worker.conversation.tokens import CountedPrefix, PrefixMemoCounter, TokenCounter
from worker.conversation.turn_inputs import check_text
from worker.errors import InvalidMessageError

State = bytes | Resident | None
"""A state as the methods take it: the blob, or what the worker kept of it decoded (see
:mod:`worker.conversation.resident`), or ``None`` for a new conversation."""


class ChatState:
    """What :class:`~worker.conversation.chat.Chat` does to a state besides running a turn."""

    # The chat's fields these bodies read (declared, with their defaults, on Chat).
    model: Model
    compactor: Compactor | None
    counter: TokenCounter
    auto_compact: bool
    max_state_bytes: int
    max_input_chars: int
    max_pinned: int
    state_format: int
    observer: Callable[[RoundTrip], None] | None
    clock: Callable[[], float]
    load: Callable[[State], LoadResult]

    @property
    def provider(self) -> str:
        return self.model.provider

    def _encode(self, st: ConversationState, memo: Memo | None = None, clean: CleanPrefix | None = None,
                counted: CountedPrefix | None = None) -> Encoded:
        return encode_bounded(st, max_bytes=self.max_state_bytes, max_pinned=self.max_pinned, memo=memo, clean=clean,
                              counted=counted, version=self.state_format)

    def _write_time(self, now: float) -> datetime | None:
        """The time the messages a write adds are given (the write's ``now``, from the chat's clock, to the second as
        the state keeps it), or ``None`` when the format written keeps no times."""
        return from_seconds(math.floor(now)) if self.state_format >= TIMES_VERSION else None

    def _timed(self, messages: Sequence[Message]) -> list[Message]:
        """The messages a caller adds as the format written keeps them: a player's message may come with the
        channel's time, which a format without times drops."""
        return list(messages) if self.state_format >= TIMES_VERSION else untimed(messages)

    def _event_applied(self, state: State, text: str, *, pinned: bool, from_player: bool,
                       key: str | None, at: datetime | None = None) -> EventResult:
        check_text("event text", text, self.max_input_chars)
        if key is not None and from_player:
            raise InvalidMessageError("a player's words cannot set a fact (only the game sets facts)")
        loaded = self.load(state)
        now = self.clock()
        if key is not None:
            st = loaded.state.with_fact(check_key(key), text)
        else:
            said = msgs.validated(replace(msgs.event(text, pinned=pinned, from_player=from_player), at=at))
            st = loaded.state.append(*self._timed([said]), at=self._write_time(now))
        # The idle clock is the player's silence: a game event does not move it, a pin or reaction they sent does.
        meta = (replace(st.meta, events=st.meta.events + 1, last_activity=now) if from_player
                else replace(st.meta, events=st.meta.events + 1))
        return self._written(replace(st, meta=meta), loaded)

    def _messages_applied(self, state: State, messages: Sequence[Message], *, from_player: bool,
                          facts: Sequence[tuple[str, str]]) -> EventResult:
        loaded = self.load(state)
        st = loaded.state
        for key, text in facts:
            check_text("fact text", text, self.max_input_chars)
            st = st.with_fact(check_key(key), text)
        added = []
        for m in messages:
            check_text(f"{m.role} text", m.content, self.max_input_chars)
            added.append(msgs.validated(m))
        now = self.clock()
        if added:
            st = st.append(*self._timed(added if st.messages else msgs.opening(added)), at=self._write_time(now))
        if from_player:
            st = replace(st, meta=replace(st.meta, last_activity=now))
        return self._written(st, loaded)

    def _written(self, st: ConversationState, loaded: LoadResult) -> EventResult:
        """An event's or messages' state, compacted when due, encoded within its bounds."""
        st, needs, counted = self._auto_compact_if_due(st, loaded.counted)
        encoded = self._encode(st, loaded.memo, counted=counted)
        return EventResult(state=encoded.blob, state_problem=loaded.problem, needs_compaction=needs,
                           pinned_dropped=encoded.pinned_dropped, resident=encoded.resident,
                           departed=departed(loaded.state, _written_state(encoded, st)))

    def _auto_compact_if_due(self, st: ConversationState, counted: CountedPrefix | None = None
                             ) -> tuple[ConversationState, bool, CountedPrefix | None]:
        """The turn's own check: compact now when due and ``auto_compact`` is on. The flag says a
        compaction is (still) due, for the worker to run one as a follow-up task. ``counted``: the history's last
        token count (the resident's), so the trigger counts only what was added since; the count to keep comes
        back."""
        if self.compactor is None:
            return st, False, None
        counter = PrefixMemoCounter(self.counter, counted)
        if not self.compactor.should_compact(st, counter):
            return st, False, counter.memo
        if not self.auto_compact:
            return st, True, counter.memo
        done = apply_compactor(self.compactor, st, counter, observer=self.observer)
        return done.state, bool(not done.applied and self.compactor.should_compact(done.state, counter)), counter.memo

    def _compaction_report(self, state: State) -> CompactionReport:
        loaded = self.load(state)
        st = loaded.state
        spent = UsageTally(self.observer)  # the summariser's tokens count towards the player's budget and usage
        done = (StepsOutcome(st) if self.compactor is None
                else apply_compactor(self.compactor, st, self.counter, observer=spent))
        new, encoded = done.state, self._encode(done.state, loaded.memo if done.state is st else None)
        return CompactionReport(state=encoded.blob, changed=new is not st, applied=done.applied,
                                usage=spent.usage(), model=spent.model,
                                errors=done.errors, messages_before=len(st.messages),
                                messages_after=len(new.messages), tokens_before=prompt_tokens(st, self.counter),
                                tokens_after=prompt_tokens(new, self.counter), state_problem=loaded.problem,
                                pinned_dropped=encoded.pinned_dropped,
                                departed=departed(st, _written_state(encoded, new)))


def _written_state(encoded: Encoded, st: ConversationState) -> ConversationState:
    """The state ``encoded`` holds (the size bound may have dropped more of ``st``)."""
    return encoded.resident.state if encoded.resident is not None else st
