"""``Chat``: the stateful chat loop over an opaque state blob.

Nothing here does I/O of its own: the model, the tools and the clock are injected. The worker calls
:meth:`Chat.run_turn`, :meth:`Chat.apply_event`, :meth:`Chat.compact_with_report` and :meth:`Chat.splice`;
library users call the contract methods :meth:`Chat.chat_with_state`, :meth:`Chat.chat`,
:meth:`Chat.append_to_state` and :meth:`Chat.compact`.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from worker.conversation import messages as msgs
from worker.conversation.compaction import Compactor, drop_oldest, droppable, run_steps
from worker.conversation.history import exchanges, repair_history
from worker.conversation.messages import Message
from worker.conversation.model import FinishReason, Model, ModelRequest, ModelResponse, Usage
from worker.conversation.prompt import prompt_tokens, render_preamble
from worker.conversation.state import (
    DEFAULT_MAX_STATE_BYTES,
    ConversationState,
    LoadResult,
    encode_state,
    load_state,
)
from worker.conversation.tokens import EstimateCounter, TokenCounter
from worker.conversation.tools import Tool, check_tools, run_tool
from worker.errors import InvalidMessageError, OversizeInputError, StateDecodeError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RoundTrip:
    """One model call, as the observer sees it (for metrics)."""

    purpose: str
    usage: Usage | None
    finish_reason: FinishReason
    seconds: float
    model: str


@dataclass(frozen=True, slots=True)
class TurnResult:
    """Everything a turn produced.

    - ``reply``: the text for the user (never empty).
    - ``state``: the new state blob.
    - ``finish_reason``: of the last model call (``"stop"`` for a reset answered without the model).
    - ``truncated``: the model hit its output limit; ``reply`` is what it wrote so far.
    - ``filtered``: the provider's content filter or a refusal ended the answer.
    - ``tool_limit_hit``: ``max_tool_iterations`` was reached; the model was asked to answer without tools.
    - ``state_problem``: the incoming blob was unusable (``reason`` says why) and the turn started fresh;
      the worker quarantines the old blob.
    - ``reset``: ``"idle_gap"`` or ``"phrase"`` when the turn started a new conversation.
    - ``needs_compaction``: the compactor's trigger fires on the new state.
    """

    reply: str
    state: bytes
    finish_reason: FinishReason = "stop"
    truncated: bool = False
    filtered: bool = False
    tool_limit_hit: bool = False
    state_problem: StateDecodeError | None = None
    reset: str | None = None
    needs_compaction: bool = False
    usage: Usage | None = None
    model_calls: int = 0
    tool_calls: int = 0


@dataclass(frozen=True, slots=True)
class EventResult:
    state: bytes
    state_problem: StateDecodeError | None = None
    needs_compaction: bool = False


@dataclass(frozen=True, slots=True)
class CompactionReport:
    """What a compaction did. ``changed`` is false when nothing was due or every step failed."""

    state: bytes
    changed: bool
    applied: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    messages_before: int = 0
    messages_after: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    state_problem: StateDecodeError | None = None


@dataclass(frozen=True, slots=True)
class SpliceResult:
    """The outcome of laying a compaction result onto the newest state. ``applied`` is false when the
    compaction was stale (a reset or another compaction came first) and the newest state was kept."""

    state: bytes
    applied: bool
    reason: str = ""
    kept_new_messages: int = 0


_PUNCT = re.compile(r"[^\w\s]+")


def _normalise(text: str) -> str:
    return " ".join(_PUNCT.sub(" ", text.casefold()).split())


@dataclass
class Chat:
    """A stateful chat over one model.

    ``compactor`` decides when and how the state shrinks; with ``auto_compact`` (the default, for library
    use) a turn compacts right after the reply is ready and a failed compaction keeps the uncompacted
    state. The worker turns ``auto_compact`` off and runs :meth:`compact` as a follow-up task instead.

    Lifecycle (both off unless configured): ``idle_gap_seconds`` — a turn after that much silence starts
    a fresh conversation; ``reset_phrases`` — a user text equal to one of them (case and punctuation
    ignored) starts a fresh conversation and is answered with ``reset_reply`` without calling the model.
    """

    model: Model
    compactor: Compactor | None = None
    tools: Sequence[Tool] = ()
    max_tool_iterations: int = 10
    counter: TokenCounter = field(default_factory=EstimateCounter)
    auto_compact: bool = True
    idle_gap_seconds: float | None = None
    reset_phrases: Sequence[str] = ()
    reset_reply: str = "OK, let's start over."
    fallback_reply: str = "Sorry, I can't help with that."
    max_state_bytes: int = DEFAULT_MAX_STATE_BYTES
    max_input_chars: int = 16_000
    max_tool_result_chars: int = 16_000
    tool_timeout: float = 30.0
    max_tokens: int | None = None
    temperature: float | None = None
    max_pinned: int = 50
    observer: Callable[[RoundTrip], None] | None = None
    clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        self._tools = check_tools(list(self.tools))
        self._phrases = {_normalise(p) for p in self.reset_phrases if _normalise(p)}
        if self.max_tool_iterations < 0:
            raise ValueError("max_tool_iterations must be >= 0")

    @property
    def provider(self) -> str:
        return self.model.provider

    # --- contract API ----------------------------------------------------------------------------

    def chat_with_state(
        self,
        state: bytes | None,
        *,
        system: str | None = None,
        user: str,
        messages: Sequence[Message | dict[str, Any]] = (),
    ) -> tuple[str, bytes]:
        """Run one turn: returns ``(reply, new_state)``. See :meth:`run_turn` for the details."""
        result = self.run_turn(state, system=system, user=user, messages=messages)
        return result.reply, result.state

    def chat(self, *, system: str | None = None, user: str, messages: Sequence[Message | dict[str, Any]] = ()) -> str:
        """A stateless turn: nothing is remembered."""
        return self.run_turn(None, system=system, user=user, messages=messages, lifecycle=False).reply

    def append_to_state(self, state: bytes | None, text: str, pinned: bool = False) -> bytes:
        """Add an event ("User has just visited Harrogate Theatre") without calling the model; the model
        reads it as context on the next turn. ``pinned`` events survive every compaction."""
        return self.apply_event(state, text, pinned=pinned).state

    def compact(self, state: bytes | None) -> bytes:
        """Apply the configured compactor now (whatever its trigger says) and return the new state."""
        return self.compact_with_report(state).state

    # --- the turn --------------------------------------------------------------------------------

    def load(self, state: bytes | None) -> LoadResult:
        return load_state(state, provider=self.provider, max_bytes=self.max_state_bytes, now=self.clock())

    def run_turn(
        self,
        state: bytes | None,
        *,
        system: str | None = None,
        user: str,
        messages: Sequence[Message | dict[str, Any]] = (),
        lifecycle: bool = True,
    ) -> TurnResult:
        """Run one user turn through the chat loop.

        ``system`` is this turn's system prompt: sent first, never stored. In ``messages`` (optional, added
        before ``user``), leading system messages join the preamble for this turn only; system messages
        after others are stored as context.

        The loop calls the model, runs the tools it asks for (a failing, hung or unknown tool becomes an
        error result the model reads), and repeats until the model answers in text or
        ``max_tool_iterations`` rounds of tools ran; then the model is asked once more with
        ``tool_choice="none"``. Finish reasons: ``length`` returns the text written so far with
        ``truncated=True`` (truncated tool calls are not run); ``content_filter`` and ``refusal`` return the
        model's text, or ``fallback_reply`` when it gave none, with ``filtered=True``.

        Raises :class:`~worker.errors.InvalidMessageError` or :class:`~worker.errors.OversizeInputError`
        for bad input and :class:`~worker.errors.ModelError` when the model fails; in both cases nothing
        was changed (the caller still holds the old state).
        """
        if not isinstance(user, str) or not user.strip():
            raise InvalidMessageError("user text must be a non-empty string")
        if len(user) > self.max_input_chars:
            raise OversizeInputError(f"user text is {len(user)} characters; the limit is {self.max_input_chars}")
        extra_preamble, added = self._split_leading_system(messages)
        now = self.clock()
        loaded = self.load(state)
        st = loaded.state
        reset: str | None = None
        if lifecycle and loaded.problem is None and state:
            gap = now - st.meta.last_activity
            if self.idle_gap_seconds is not None and st.meta.last_activity and gap > self.idle_gap_seconds:
                st, reset = ConversationState.fresh(self.provider, now=now), "idle_gap"
        if lifecycle and self._phrases and _normalise(user) in self._phrases:
            fresh = ConversationState.fresh(self.provider, now=now)
            return TurnResult(reply=self.reset_reply, state=self._encode(fresh), reset="phrase",
                              state_problem=loaded.problem)

        st = st.append(*added, msgs.user(user))
        reply, st, info = self._loop(st, system, extra_preamble)
        st = replace(st, meta=replace(st.meta, turns=st.meta.turns + 1, last_activity=now))
        return self._finish_turn(st, reply, info, loaded.problem, reset)

    def _split_leading_system(self, messages: Sequence[Message | dict[str, Any]]) -> tuple[list[str], list[Message]]:
        converted = [m if isinstance(m, Message) else msgs.from_dict(m) for m in messages]
        for m in converted:
            msgs.validated(m)
            if len(m.content) > self.max_input_chars:
                raise OversizeInputError(f"a {m.role} message is over {self.max_input_chars} characters")
        lead: list[str] = []
        i = 0
        while i < len(converted) and converted[i].role == "system":
            lead.append(converted[i].content)
            i += 1
        return lead, converted[i:]

    def _request(self, st: ConversationState, system: str | None, extra: Sequence[str],
                 tool_choice: str = "auto") -> ModelRequest:
        history, _ = repair_history(st.messages)
        return ModelRequest(
            system=render_preamble(system, st, extra),
            messages=history,
            tools=[t.spec for t in self._tools.values()],
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            tool_choice="none" if tool_choice == "none" else "auto",
        )

    def _call(self, request: ModelRequest) -> ModelResponse:
        started = time.perf_counter()
        response = self.model.complete(request)
        if self.observer is not None:
            try:
                self.observer(RoundTrip(request.purpose, response.usage, response.finish_reason,
                                        time.perf_counter() - started, self.model.model_name))
            except Exception:  # metrics must never break a turn
                log.exception("observer failed")
        return response

    def _loop(self, st: ConversationState, system: str | None, extra: Sequence[str]) -> tuple[str, ConversationState, dict[str, Any]]:
        info: dict[str, Any] = {"calls": 0, "tools": 0, "truncated": False, "filtered": False, "limit": False}
        rounds = 0
        tool_choice = "auto"
        while True:
            request = self._request(st, system, extra, tool_choice)
            seen = st.last_seq
            response = self._call(request)
            info["calls"] += 1
            info["finish"] = response.finish_reason
            if response.usage is not None:
                st = replace(st, last_usage=response.usage, seen_seq=seen)
            m = response.message
            text = m.content.strip()
            if response.finish_reason in ("content_filter", "refusal"):
                info["filtered"] = True
                reply = text or self.fallback_reply
                st = st.append(Message(role="assistant", content=reply))
                return reply, st, info
            if response.finish_reason == "length":
                info["truncated"] = True
                reply = text or "(The answer was cut short.)"
                # A truncated tool call cannot be trusted: keep only the text.
                keep = m if not m.tool_calls and text else Message(role="assistant", content=reply)
                st = st.append(keep)
                return reply, st, info
            if m.tool_calls and tool_choice == "none":
                # The model asked for tools after being told not to: answer with what text there is.
                reply = text or self.fallback_reply
                st = st.append(Message(role="assistant", content=reply))
                return reply, st, info
            if not m.tool_calls:
                reply = text or self.fallback_reply
                st = st.append(m if text else replace(m, content=reply, raw=None))
                return reply, st, info
            st = st.append(m)
            results = [
                run_tool(self._tools, call, default_timeout=self.tool_timeout, max_chars=self.max_tool_result_chars)
                for call in m.tool_calls
            ]
            info["tools"] += len(results)
            st = st.append(*results)
            rounds += 1
            if rounds >= self.max_tool_iterations:
                info["limit"] = True
                tool_choice = "none"

    def _finish_turn(self, st: ConversationState, reply: str, info: dict[str, Any],
                     problem: StateDecodeError | None, reset: str | None) -> TurnResult:
        st, needs = self._maybe_compact(st)
        return TurnResult(
            reply=reply,
            state=self._encode(st),
            finish_reason=info.get("finish", "stop"),
            truncated=info["truncated"],
            filtered=info["filtered"],
            tool_limit_hit=info["limit"],
            state_problem=problem,
            reset=reset,
            needs_compaction=needs,
            usage=st.last_usage,
            model_calls=info["calls"],
            tool_calls=info["tools"],
        )

    # --- events, compaction, splicing --------------------------------------------------------------

    def apply_event(self, state: bytes | None, text: str, *, pinned: bool = False) -> EventResult:
        """:meth:`append_to_state` with the details the worker needs."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidMessageError("event text must be a non-empty string")
        if len(text) > self.max_input_chars:
            raise OversizeInputError(f"event text is {len(text)} characters; the limit is {self.max_input_chars}")
        loaded = self.load(state)
        st = loaded.state.append(msgs.event(text, pinned=pinned))
        st = replace(st, meta=replace(st.meta, events=st.meta.events + 1, last_activity=self.clock()))
        st, needs = self._maybe_compact(st)
        return EventResult(state=self._encode(st), state_problem=loaded.problem, needs_compaction=needs)

    def needs_compaction(self, state: bytes | None) -> bool:
        """Whether the compactor's trigger fires on ``state``."""
        if self.compactor is None:
            return False
        return self.compactor.should_compact(self.load(state).state, self.counter)

    def _maybe_compact(self, st: ConversationState) -> tuple[ConversationState, bool]:
        if self.compactor is None or not self.compactor.should_compact(st, self.counter):
            return st, False
        if not self.auto_compact:
            return st, True
        new, applied, _errors = self._run_compactor(st)
        return new, bool(not applied and self.compactor.should_compact(new, self.counter))

    def _run_compactor(self, st: ConversationState) -> tuple[ConversationState, list[str], list[str]]:
        assert self.compactor is not None
        new, applied, errors = run_steps([self.compactor], st, self.counter)
        if len(new.pinned) > self.max_pinned:
            log.warning("pinned items over the cap; dropping the oldest",
                        extra={"dropped": len(new.pinned) - self.max_pinned})
            new = replace(new, pinned=new.pinned[-self.max_pinned:])
        if applied and new is not st:
            new = replace(new, generation=st.generation + 1,
                          meta=replace(new.meta, compactions=new.meta.compactions + 1))
        return new, applied, errors

    def compact_with_report(self, state: bytes | None) -> CompactionReport:
        """Apply the compactor to ``state`` (only the steps whose triggers fire) and report what changed:
        messages and tokens before and after, the steps applied and the errors. A failure keeps the state."""
        loaded = self.load(state)
        st = loaded.state
        before_msgs, before_tokens = len(st.messages), prompt_tokens(st, self.counter)
        if self.compactor is None:
            return CompactionReport(state=self._encode(st), changed=False, messages_before=before_msgs,
                                    messages_after=before_msgs, tokens_before=before_tokens,
                                    tokens_after=before_tokens, state_problem=loaded.problem)
        new, applied, errors = self._run_compactor(st)
        return CompactionReport(
            state=self._encode(new),
            changed=new is not st,
            applied=tuple(applied),
            errors=tuple(errors),
            messages_before=before_msgs,
            messages_after=len(new.messages),
            tokens_before=before_tokens,
            tokens_after=prompt_tokens(new, self.counter),
            state_problem=loaded.problem,
        )

    def splice(self, newest: bytes | None, compacted: bytes) -> SpliceResult:
        """Lay a compaction result onto the newest state.

        ``compacted`` was computed from an older state (the base). Messages added to the newest state
        after the base (``seq`` at or beyond the base's ``next_seq``) are appended to the compacted history,
        and the newest counters and usage are kept. The compaction is stale, and the newest state is kept
        unchanged, when the conversation was reset meanwhile (another epoch) or another compaction was
        spliced first (another generation).
        """
        cur = self.load(newest)
        if cur.problem is not None or not newest:
            return SpliceResult(state=newest or b"", applied=False, reason="no usable newest state")
        comp = self.load(compacted)
        if comp.problem is not None:
            return SpliceResult(state=newest, applied=False, reason=f"compaction result unusable: {comp.problem}")
        n, c = cur.state, comp.state
        if n.meta.epoch != c.meta.epoch:
            return SpliceResult(state=newest, applied=False, reason="conversation was reset meanwhile")
        if c.generation != n.generation + 1:
            return SpliceResult(state=newest, applied=False, reason="another compaction came first")
        new_msgs = tuple(m for m in n.messages if m.seq >= c.next_seq)
        saw_new = n.seen_seq >= c.next_seq
        merged = replace(
            c,
            messages=c.messages + new_msgs,
            next_seq=n.next_seq,
            seen_seq=n.seen_seq,
            last_usage=n.last_usage if saw_new else None,
            meta=replace(n.meta, compactions=n.meta.compactions + 1),
        )
        return SpliceResult(state=self._encode(merged), applied=True, kept_new_messages=len(new_msgs))

    # --- encoding with a hard size bound --------------------------------------------------------------

    def _encode(self, st: ConversationState) -> bytes:
        blob = encode_state(st)
        while len(blob) > self.max_state_bytes and droppable(st):
            log.warning("state over its size limit; dropping the oldest exchange",
                        extra={"bytes": len(blob), "limit": self.max_state_bytes})
            st = drop_oldest(st, 1, self.max_pinned)
            blob = encode_state(st)
        if len(blob) > self.max_state_bytes:
            # One exchange alone is too big (huge tool output): keep the words, drop the bulk.
            last = exchanges(st.messages)[-1].of(st.messages) if st.messages else []
            slim = [Message(role=m.role, content=m.content[:2000])
                    for m in last if m.role in ("user", "event") or (m.role == "assistant" and not m.tool_calls)]
            st = replace(st, messages=(), pinned=st.pinned[-10:], summary=st.summary[:8000]).append(*slim)
            blob = encode_state(st)
        return blob

