"""``Chat``: the stateful chat loop over an opaque state blob.

Nothing here does I/O of its own: the model, the tools and the clock are injected. The worker calls
:meth:`Chat.run_turn`, :meth:`Chat.run_event_turn` (the model answers a game event), :meth:`Chat.apply_event`,
:meth:`Chat.needs_compaction`, :meth:`Chat.compact_with_report` and :meth:`Chat.splice`; library users call the
contract methods :meth:`Chat.chat_with_state`, :meth:`Chat.chat`, :meth:`Chat.append_to_state`,
:meth:`Chat.respond_to_event` and :meth:`Chat.compact`. Keyed facts are in :mod:`worker.conversation.facts`.

Which "compact" is which: :meth:`Chat.compact` is the library contract (blob in, blob out);
:meth:`Chat.compact_with_report` is the worker's variant that also says what it did; both run the
configured :class:`~worker.conversation.compaction.Compactor` (the strategy protocol users implement)
through :func:`~worker.conversation.compaction.apply_compactor`. :meth:`Chat._auto_compact_if_due` is the
turn's own check, which compacts in place only with ``auto_compact``. The tool loop lives in :mod:`worker.conversation.loop`, the
size-bounded encoder in :mod:`worker.conversation.bounded`, splicing in :mod:`worker.conversation.splice`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from worker.conversation import messages as msgs
from worker.conversation.bounded import Encoded, encode_bounded
from worker.conversation.compaction import Compactor, StepsOutcome, apply_compactor
from worker.conversation.facts import check_key
from worker.conversation.history import CleanPrefix, repair_from, repair_history
from worker.conversation.inspect import reply_mark
from worker.conversation.loop import LoopOutcome, ToolChoice, ToolLoop
from worker.conversation.messages import Message
from worker.conversation.model import Attachment, Model, ModelRequest, ModelResponse
from worker.conversation.observe import RoundTrip, UsageTally, complete_observed
from worker.conversation.prompt import (
    DEFAULT_FACT_PLACEMENT,
    FactPlacement,
    prompt_tokens,
    render_after_history,
    render_preamble,
    stable_chars,
)
from worker.conversation.resident import Resident
from worker.conversation.results import CompactionReport, EventResult, TurnResult
from worker.conversation.splice import SpliceResult, splice_blobs
from worker.conversation.state import (
    DEFAULT_MAX_STATE_BYTES,
    ConversationState,
    LoadResult,
    Memo,
    encode_state,
    load_state,
)
from worker.conversation.tokens import CountedPrefix, EstimateCounter, PrefixMemoCounter, TokenCounter
from worker.conversation.tools import Tool, check_tools, without_lone_surrogates
from worker.conversation.turn_journal import NoJournal, TurnJournal
from worker.errors import InvalidMessageError, InvalidTextError, OversizeInputError, StateDecodeError

__all__ = ["Chat", "CompactionReport", "EventResult", "RoundTrip", "SpliceResult", "TurnResult"]

DEFAULT_MAX_PINNED = 50

State = bytes | Resident | None
"""A state as the methods take it: the blob, or what the worker kept of it decoded (see
:mod:`worker.conversation.resident`), or ``None`` for a new conversation."""

_PUNCT = re.compile(r"[^\w\s]+")


def _normalise(text: str) -> str:
    return " ".join(_PUNCT.sub(" ", text.casefold()).split())


def _idle(st: ConversationState, now: float, gap: float | None) -> bool:
    """The player has been silent longer than ``gap``: only their turns move the clock (a steady stream of game
    events must not keep an abandoned conversation alive), and a player who never spoke has nothing to reset."""
    last = st.meta.last_activity
    return gap is not None and st.meta.turns > 0 and bool(last) and now - last > gap


def _silence(messages: Sequence[Message]) -> list[Message]:
    """What was said after the player's last exchange (their last message and the model's answer to it): the game's
    events, the model's answers to the events it answered, a person's messages. A slice that starts with a
    person's words gets the game's note before it (a history starts on the player's side)."""
    last = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    since = last + 1
    while since < len(messages) and messages[since].role in ("assistant", "tool") and \
            messages[since].name != msgs.OPERATOR:
        since += 1  # the model's answer to the player's last message: part of the old conversation
    return msgs.opening(messages[since:])


def _fresh_after_idle(st: ConversationState, provider: str, now: float) -> ConversationState:
    """A new conversation that keeps what was said after the player's last exchange and the keyed facts: what the
    game told the model during the silence (its events, the answers to the events the model answered, a person's
    messages: what the player may be answering), and the game's current facts (the target), are the context the
    player comes back to."""
    fresh = replace(ConversationState.fresh(provider, now=now), facts=st.facts, preamble_facts=st.facts)
    kept = _silence(st.messages)
    return fresh.append(*kept) if kept else fresh


def _check_utf8(what: str, text: str | None) -> None:
    """A Python str may hold a lone surrogate ("\\ud800") that UTF-8 cannot encode: refused here, before anything
    is applied, instead of failing as a bare UnicodeEncodeError when the state is encoded or the request sent."""
    if text is None:
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidTextError(f"{what} holds a character UTF-8 cannot encode ({text[exc.start]!r}, a lone "
                               f"surrogate) at position {exc.start}") from None


def _check_message_utf8(m: Message) -> None:
    _check_utf8(f"a {m.role} message", m.content)
    for call in m.tool_calls:
        _check_utf8(f"a {m.role} message's tool call", f"{call.name}{call.arguments}")


def _check_text(what: str, text: object, max_chars: int) -> None:
    if not isinstance(text, str) or not text.strip():
        raise InvalidMessageError(f"{what} must be a non-empty string")
    if len(text) > max_chars:
        raise OversizeInputError(f"{what} is {len(text)} characters; the limit is {max_chars}")
    _check_utf8(what, text)


def _user_message(user: str | Message, max_chars: int) -> Message:
    """The turn's user message: text, or a :class:`Message` from ``messages.user(text, media=...)`` (a photo,
    whose caption may be empty)."""
    if not isinstance(user, Message):
        _check_text("user text", user, max_chars)
        return msgs.user(user)
    if user.role != "user":
        raise InvalidMessageError(f"the turn's user message must have the user role, not {user.role!r}")
    msgs.validated(user)
    if len(user.content) > max_chars:
        raise OversizeInputError(f"user text is {len(user.content)} characters; the limit is {max_chars}")
    _check_message_utf8(user)
    return user


def _check_attachments(attachments: Mapping[str, Attachment]) -> dict[str, Attachment]:
    for key, value in attachments.items():
        if not isinstance(key, str) or not isinstance(value, Attachment):
            raise InvalidMessageError("attachments map media ids (str) to Attachment values")
    return dict(attachments)


def _split_leading_system(messages: Sequence[Message | dict[str, Any]],
                          max_chars: int) -> tuple[list[str], list[Message]]:
    """Leading system messages (this turn's extra preamble) and the rest (stored), all validated."""
    converted = [m if isinstance(m, Message) else msgs.from_dict(m) for m in messages]
    for m in converted:
        msgs.validated(m)
        if len(m.content) > max_chars:
            raise OversizeInputError(f"a {m.role} message is over {max_chars} characters")
        _check_message_utf8(m)
    lead: list[str] = []
    i = 0
    while i < len(converted) and converted[i].role == "system":
        lead.append(converted[i].content)
        i += 1
    return lead, converted[i:]


@dataclass
class Chat:
    """A stateful chat over one model.

    ``compactor`` decides when and how the state shrinks; with ``auto_compact`` (the default, for library
    use) a turn compacts right after the reply is ready and a failed compaction keeps the uncompacted
    state. The worker turns ``auto_compact`` off and runs :meth:`compact_with_report` as a follow-up task
    instead. Every model call of a compaction this Chat runs (the summariser's) reaches ``observer`` too,
    with ``purpose="summarize"``.

    Pinned items survive every compaction up to ``max_pinned`` (``PARLEY_MAX_PINNED`` in the worker): the
    one cap, applied whenever a state is written. Beyond it the oldest pinned items go, as they do when
    pinned items alone would not fit in ``max_state_bytes``; each result's ``pinned_dropped`` counts them.

    Lifecycle (both off unless configured): ``idle_gap_seconds`` — a turn after that much silence starts
    a fresh conversation; ``reset_phrases`` — a user text equal to one of them (case and punctuation
    ignored) starts a fresh conversation and is answered with ``reset_reply`` without calling the model.
    """

    model: Model
    compactor: Compactor | None = None
    tools: Sequence[Tool] = ()
    # Called at the start of every turn for the tools whose set changes at run time (an MCP server's, gone
    # while the server is down); added to ``tools`` for that turn only.
    tool_source: Callable[[], Sequence[Tool]] | None = None
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
    max_pinned: int = DEFAULT_MAX_PINNED
    # Where the keyed facts are rendered (:mod:`worker.conversation.prompt`): those as of the last compaction in the
    # preamble and the ones changed since after the history (the default: the prompt's start stays the same between
    # compactions, for the providers' prompt caches, and a fact is re-sent only once it changed), all after the
    # history, or all in the preamble with the pinned items (the layout before).
    facts_placement: FactPlacement = DEFAULT_FACT_PLACEMENT
    observer: Callable[[RoundTrip], None] | None = None
    clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        self._tools = check_tools(list(self.tools))
        self._phrases = {_normalise(p) for p in self.reset_phrases if _normalise(p)}
        if self.max_tool_iterations < 0:
            raise ValueError("max_tool_iterations must be >= 0")
        if self.max_pinned < 0:
            raise ValueError("max_pinned must be >= 0")

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
        """Run one turn: returns ``(reply, new_state)``. See :meth:`run_turn` for the details. ``reply`` is the
        assistant's text: with rich parts (reply tools, a game tool's ``reply_parts``) their text rendering comes
        first (:attr:`TurnResult.text`), so it is never empty; :meth:`run_turn` gives the parts themselves."""
        result = self.run_turn(state, system=system, user=user, messages=messages)
        return result.text, result.state

    def chat(self, *, system: str | None = None, user: str, messages: Sequence[Message | dict[str, Any]] = ()) -> str:
        """A stateless turn: nothing is remembered."""
        return self.run_turn(None, system=system, user=user, messages=messages, lifecycle=False).text

    def append_to_state(self, state: bytes | None, text: str, pinned: bool = False, key: str | None = None) -> bytes:
        """Add an event ("User has just visited Harrogate Theatre") without calling the model; the model
        reads it as context on the next turn. ``pinned`` events survive every compaction (up to
        ``max_pinned`` of them). With ``key`` the text is a fact that replaces the conversation's fact of that key
        (latest wins; see :mod:`worker.conversation.facts`): kept outside the history, never compacted away."""
        return self.apply_event(state, text, pinned=pinned, key=key).state

    def respond_to_event(self, state: bytes | None, text: str, *, system: str | None = None,
                         key: str | None = None) -> tuple[str, bytes]:
        """The model answers a game event ("You tagged Harrogate Theatre!") with no player message: returns
        ``(reply, new_state)`` (``reply`` as in :meth:`chat_with_state`). See :meth:`run_event_turn`."""
        result = self.run_event_turn(state, text, system=system, key=key)
        return result.text, result.state

    def compact(self, state: bytes | None) -> bytes:
        """Apply the configured compactor now (whatever its trigger says) and return the new state."""
        return self.compact_with_report(state).state

    # --- the turn --------------------------------------------------------------------------------

    def load(self, state: State) -> LoadResult:
        """Decode a blob (or take a :class:`~worker.conversation.resident.Resident` as it is: nothing to decode)."""
        if isinstance(state, Resident):
            if state.state.provider == self.provider:
                return LoadResult(state.state, memo=state.memo, clean=state.clean, counted=state.counted)
            state = encode_state(state.state)  # another provider's: refused by the decoder, as its blob would be
        return load_state(state, provider=self.provider, max_bytes=self.max_state_bytes, now=self.clock())

    def run_turn(
        self,
        state: State,
        *,
        system: str | None = None,
        user: str | Message,
        messages: Sequence[Message | dict[str, Any]] = (),
        lifecycle: bool = True,
        journal: TurnJournal | None = None,
        attachments: Mapping[str, Attachment] | None = None,
        tools: Sequence[Tool] = (),
        after_history: Sequence[str] = (),
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

        Raises :class:`~worker.errors.InvalidMessageError`, :class:`~worker.errors.OversizeInputError` or
        :class:`~worker.errors.InvalidTextError` (a lone surrogate in any text given, the system prompt included)
        for bad input and :class:`~worker.errors.ModelError` when the model fails; in both cases nothing
        was changed (the caller still holds the old state).

        ``journal`` (default: none) makes a retried turn replay what an earlier, crashed run of the same turn
        recorded instead of calling the model and the tools again (see :mod:`worker.conversation.turn_journal`).

        ``user`` is the text, or a user :class:`Message` (``messages.user(caption, media=MediaRef(...))`` for a
        photo); user messages with media may appear in ``messages`` too. ``attachments`` (media id ->
        :class:`~worker.conversation.model.Attachment`) go with every request of this turn: a photo whose id is
        there is sent as a picture, any other as text. The state keeps only the references.

        ``tools`` are offered for this turn only, beside the chat's (the tools of the business number the
        conversation is on, in the worker); one of the same name as a chat's tool takes its place for the turn.

        ``after_history`` (texts for this turn only, never stored) is rendered after the history, with the keyed
        facts: context that changes from turn to turn (a live game context) costs the prompt cache nothing there,
        where in ``system`` it would change the start of every request.
        """
        _check_utf8("the system prompt", system)
        _check_after_history(after_history)
        turn_user = _user_message(user, self.max_input_chars)
        files = _check_attachments(attachments or {})
        extra_preamble, added = _split_leading_system(messages, self.max_input_chars)
        now = self.clock()
        loaded = self.load(state)
        st = loaded.state
        reset = "idle_gap" if lifecycle and loaded.problem is None and state and _idle(st, now, self.idle_gap_seconds) else None
        if lifecycle and self._phrases and turn_user.media is None and _normalise(turn_user.content) in self._phrases:
            reset = "phrase"
        if reset == "idle_gap":
            st = _fresh_after_idle(st, self.provider, now)
        elif reset is not None:
            st = ConversationState.fresh(self.provider, now=now)
        if reset == "phrase":
            encoded = self._encode(st)
            return TurnResult(reply=self.reset_reply, state=encoded.blob, reset=reset,
                              state_problem=loaded.problem, resident=encoded.resident)
        checked = _Checked(None if reset else loaded.clean)
        loop = _tool_loop(self, system, extra_preamble, journal or NoJournal(), files, checked, tools,
                          after_history)
        out = loop.run(st.append(*added, turn_user))
        out.state = out.state.with_meta(out.state.meta.after_turn(now))
        return self._finish_turn(out, loaded.problem, reset, None if reset else loaded.memo, checked.clean,
                                 None if reset else loaded.counted)

    def run_event_turn(self, state: State, text: str, *, system: str | None = None, key: str | None = None,
                       pinned: bool = False, journal: TurnJournal | None = None,
                       tools: Sequence[Tool] = (), after_history: Sequence[str] = ()) -> TurnResult:
        """A turn in which the model answers a game event: the event joins the history as the game's (the model
        reads it framed as an event, never as the player's words), then the tool loop runs as in :meth:`run_turn`.
        With ``key`` the text also sets that fact. The player did not speak: the idle clock and the turn count
        stay (``meta.events`` counts it), and neither the idle gap nor a reset phrase applies. ``tools``: this
        turn's own and ``after_history`` this turn's texts after the history, as in :meth:`run_turn`."""
        _check_utf8("the system prompt", system)
        _check_after_history(after_history)
        _check_text("event text", text, self.max_input_chars)
        loaded = self.load(state)
        st = loaded.state if key is None else loaded.state.with_fact(check_key(key), text)
        st = st.append(msgs.event(text, pinned=pinned and key is None))
        st = st.with_meta(replace(st.meta, events=st.meta.events + 1))
        checked = _Checked(loaded.clean)
        out = _tool_loop(self, system, (), journal or NoJournal(), {}, checked, tools, after_history).run(st)
        return self._finish_turn(out, loaded.problem, None, loaded.memo, checked.clean, loaded.counted)

    def _call(self, request: ModelRequest) -> ModelResponse:
        return _encodable(complete_observed(self.model, request, self.observer))

    def _finish_turn(self, out: LoopOutcome, problem: StateDecodeError | None, reset: str | None,
                     memo: Memo | None, clean: CleanPrefix | None, counted: CountedPrefix | None) -> TurnResult:
        st, needs, counted = self._auto_compact_if_due(out.state, counted)
        encoded = self._encode(st, memo, clean, counted)
        return TurnResult(reply=out.reply, state=encoded.blob, finish_reason=out.finish_reason,
                          truncated=out.truncated, filtered=out.filtered, tool_limit_hit=out.tool_limit_hit,
                          state_problem=problem, reset=reset, needs_compaction=needs, usage=st.last_usage,
                          model_calls=out.model_calls, tool_calls=out.tool_calls,
                          replayed_rounds=out.replayed_rounds, replayed_results=out.replayed_results,
                          pinned_dropped=encoded.pinned_dropped, resident=encoded.resident, parts=tuple(out.parts),
                          reply_at=reply_mark(encoded.resident.state)
                          if out.reply and encoded.resident is not None else None)

    # --- events, compaction, splicing --------------------------------------------------------------

    def apply_event(self, state: State, text: str, *, pinned: bool = False, from_player: bool = False,
                    key: str | None = None) -> EventResult:
        """:meth:`append_to_state` with the details the worker needs. ``from_player``: the text is something the
        player sent (a location pin, a reaction), added as the player's words, not as a game event; it can never
        set a fact (``key``)."""
        _check_text("event text", text, self.max_input_chars)
        if key is not None and from_player:
            raise InvalidMessageError("a player's words cannot set a fact (only the game sets facts)")
        loaded = self.load(state)
        if key is not None:
            st = loaded.state.with_fact(check_key(key), text)
        else:
            st = loaded.state.append(msgs.event(text, pinned=pinned, from_player=from_player))
        # The idle clock is the player's silence: a game event does not move it, a pin or reaction they sent does.
        meta = (replace(st.meta, events=st.meta.events + 1, last_activity=self.clock()) if from_player
                else replace(st.meta, events=st.meta.events + 1))
        st = replace(st, meta=meta)
        st, needs, counted = self._auto_compact_if_due(st, loaded.counted)
        encoded = self._encode(st, loaded.memo, counted=counted)
        return EventResult(state=encoded.blob, state_problem=loaded.problem, needs_compaction=needs,
                           pinned_dropped=encoded.pinned_dropped, resident=encoded.resident)

    def apply_messages(self, state: State, messages: Sequence[Message], *, from_player: bool = False,
                       facts: Sequence[tuple[str, str]] = ()) -> EventResult:
        """Add ``messages`` to the state with no model call: what the player said while a person had taken the
        conversation over (``from_player``: the idle clock moves, as for any message of theirs), or that person's
        own words (:func:`~worker.conversation.messages.operator`). The next turn's model reads them in order.
        ``facts`` (key, text), in order, set the facts a withheld keyed event carried (latest wins)."""
        loaded = self.load(state)
        st = loaded.state
        for key, text in facts:
            _check_text("fact text", text, self.max_input_chars)
            st = st.with_fact(check_key(key), text)
        added = []
        for m in messages:
            _check_text(f"{m.role} text", m.content, self.max_input_chars)
            added.append(msgs.validated(m))
        if added:
            st = st.append(*(added if st.messages else msgs.opening(added)))
        if from_player:
            st = replace(st, meta=replace(st.meta, last_activity=self.clock()))
        st, needs, counted = self._auto_compact_if_due(st, loaded.counted)
        encoded = self._encode(st, loaded.memo, counted=counted)
        return EventResult(state=encoded.blob, state_problem=loaded.problem, needs_compaction=needs,
                           pinned_dropped=encoded.pinned_dropped, resident=encoded.resident)

    def needs_compaction(self, state: State) -> bool:
        """Whether the compactor's trigger fires on ``state``."""
        if self.compactor is None:
            return False
        return self.compactor.should_compact(self.load(state).state, self.counter)

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

    def compact_with_report(self, state: State) -> CompactionReport:
        """Apply the compactor to ``state`` (only the steps whose triggers fire) and report what changed:
        messages and tokens before and after, the steps applied, the errors and the pinned items dropped.
        A failure keeps the state."""
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
                                pinned_dropped=encoded.pinned_dropped)

    def splice(self, newest: State, compacted: bytes) -> SpliceResult:
        """Lay a compaction result onto the newest state (see :mod:`worker.conversation.splice`)."""
        if isinstance(newest, Resident):  # rare (one per compaction): the blob the splice works on
            newest = encode_state(newest.state)
        return splice_blobs(newest, compacted, load=self.load, encode=self._encode)

    def _encode(self, st: ConversationState, memo: Memo | None = None, clean: CleanPrefix | None = None,
                counted: CountedPrefix | None = None) -> Encoded:
        return encode_bounded(st, max_bytes=self.max_state_bytes, max_pinned=self.max_pinned, memo=memo, clean=clean,
                              counted=counted)


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


@dataclass
class _Checked:
    """The longest history of this turn known valid (see :class:`~worker.conversation.history.CleanPrefix`):
    each request checks only what was added since, and the turn hands it on with the state it writes."""

    clean: CleanPrefix | None


def _check_after_history(texts: Sequence[str]) -> None:
    """A turn's texts after the history are checked as the system prompt is (they reach the provider beside it)."""
    for text in texts:
        _check_utf8("the context after the history", text)


def _tool_loop(chat: Chat, system: str | None, extra: Sequence[str], journal: TurnJournal,
               attachments: Mapping[str, Attachment], checked: _Checked | None = None,
               own: Sequence[Tool] = (), after: Sequence[str] = ()) -> ToolLoop:
    """The tool loop of one turn: the chat's fixed tools plus, for this turn only, those its ``tool_source``
    offers now and the turn's ``own`` (which take the place of any of the same name); each request built from the state as the loop has it, with the turn's attachments (a round
    after a tool call still shows the model the photo it is answering)."""
    tools = chat._tools if chat.tool_source is None else check_tools([*chat._tools.values(), *chat.tool_source()])
    if own:
        tools = {**tools, **check_tools(list(own))}

    stable = stable_chars(system, extra)

    def request_for(st: ConversationState, tool_choice: ToolChoice) -> ModelRequest:
        if checked is None:
            history, _ = repair_history(st.messages)
        else:
            history, _, clean = repair_from(st.messages, checked.clean)
            checked.clean = clean or checked.clean
        return ModelRequest(system=render_preamble(system, st, extra, chat.facts_placement), messages=history,
                            tools=[t.spec for t in tools.values()], max_tokens=chat.max_tokens,
                            temperature=chat.temperature, tool_choice=tool_choice, attachments=attachments,
                            after_history=render_after_history(st, after, chat.facts_placement), system_stable=stable)

    return ToolLoop(call=chat._call, request_for=request_for, tools=tools,
                    max_tool_iterations=chat.max_tool_iterations, fallback_reply=chat.fallback_reply,
                    tool_timeout=chat.tool_timeout, max_tool_result_chars=chat.max_tool_result_chars,
                    journal=journal)
