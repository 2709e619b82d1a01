"""``Chat``: the stateful chat loop over an opaque state blob.

Nothing here does I/O of its own: the model, the tools and the clock are injected. The worker calls
:meth:`Chat.run_turn`, :meth:`Chat.run_event_turn` (the model answers a game event), :meth:`Chat.apply_event`,
:meth:`Chat.needs_compaction`, :meth:`Chat.compact_with_report` and :meth:`Chat.splice`; library users call the
contract methods :meth:`Chat.chat_with_state`, :meth:`Chat.chat`, :meth:`Chat.append_to_state`,
:meth:`Chat.respond_to_event` and :meth:`Chat.compact`. Keyed facts are in :mod:`worker.conversation.facts`.

Which "compact" is which: :meth:`Chat.compact` is the library contract (blob in, blob out);
:meth:`Chat.compact_with_report` is the worker's variant that also says what it did; both run the
configured :class:`~worker.conversation.compaction.Compactor` (the strategy protocol users implement)
through :func:`~worker.conversation.compaction.apply_compactor`. ``Chat._auto_compact_if_due`` is the
turn's own check, which compacts in place only with ``auto_compact``.

``Chat`` holds the settings and the public methods; their bodies live by job: running a turn in
:mod:`worker.conversation.chat_turn`, what is done to a state besides (events, messages, compaction) in
:mod:`worker.conversation.chat_state`, the input checks in :mod:`worker.conversation.turn_inputs`, the resets in
:mod:`worker.conversation.resets`. The tool loop lives in :mod:`worker.conversation.loop`, the size-bounded encoder
in :mod:`worker.conversation.bounded`, splicing in :mod:`worker.conversation.splice`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from worker.conversation.chat_state import State
from worker.conversation.chat_turn import ChatTurn
from worker.conversation.compaction import Compactor
from worker.conversation.loop import DEFAULT_MAX_REPLY_PARTS
from worker.conversation.messages import Message
from worker.conversation.model import Attachment, Model
from worker.conversation.observe import RoundTrip
from worker.conversation.prompt import DEFAULT_FACT_PLACEMENT, FactPlacement
from worker.conversation.recall.archive import Archive
from worker.conversation.recall.leaving import archived
from worker.conversation.resets import normalise
from worker.conversation.resident import Resident
from worker.conversation.results import CompactionReport, EventResult, TurnResult
from worker.conversation.splice import SpliceResult, splice_blobs
from worker.conversation.state import DEFAULT_MAX_STATE_BYTES, FORMAT_VERSION, LoadResult, encode_state, load_state
from worker.conversation.state_encode import check_version
from worker.conversation.tokens import EstimateCounter, TokenCounter
from worker.conversation.tools import Tool, check_tools, turn_conversation_id
from worker.conversation.turn_journal import TurnJournal

__all__ = ["Chat", "CompactionReport", "EventResult", "RoundTrip", "SpliceResult", "State", "TurnResult"]

DEFAULT_MAX_PINNED = 50

_Departing = TypeVar("_Departing", TurnResult, EventResult, CompactionReport)


@dataclass
class Chat(ChatTurn):
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
    ignored) starts a fresh conversation and is answered with ``reset_reply`` without calling the model. A turn
    with several new user messages (``messages``, a burst) starts over at the last phrase among them: the
    messages after it are the new conversation's first, and the model answers them.
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
    # The most parts one reply holds (:data:`~worker.conversation.loop.DEFAULT_MAX_REPLY_PARTS`): past it a tool call
    # that adds parts is an error result the model reads, and its parts are not added. Last, so that the fields
    # before it keep their places for a caller who passes them by position.
    max_reply_parts: int = DEFAULT_MAX_REPLY_PARTS
    # Where messages that left the history are kept (:mod:`worker.conversation.recall`): what leaves the verbatim
    # history (a compaction's dropped exchanges, an idle reset's old history) is appended under ``conversation_id``
    # (or the conversation of a :func:`~worker.conversation.tools.turn_context` around the call, as it is read)
    # and a reset phrase erases it; the model may search it (the ``search_conversation`` tool) or matches are quoted
    # after the history (``auto``), as :func:`~worker.conversation.recall.reading.reading_of` resolves. Without one,
    # recall is off. The worker archives in its commits instead (the store's archive) and reads through its own.
    archive: Archive | None = None
    conversation_id: str = "default"
    # The state format written (:data:`~worker.conversation.state_format.WRITABLE_VERSIONS`): the newest, which keeps
    # each message's time, or the one before it while processes that read no newer still share the states
    # (``PARLEY_STATE_FORMAT`` in the worker). Every format is read whatever this says.
    state_format: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        check_version(self.state_format)
        self._tools = check_tools(list(self.tools))
        self._phrases = {normalise(p) for p in self.reset_phrases if normalise(p)}
        if self.max_tool_iterations < 0:
            raise ValueError("max_tool_iterations must be >= 0")
        if self.max_pinned < 0:
            raise ValueError("max_pinned must be >= 0")
        if self.max_reply_parts < 1:
            raise ValueError("max_reply_parts must be >= 1 (the final text is one)")

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
        return self._archived(self._user_turn(state, system=system, user=user, messages=messages, lifecycle=lifecycle,
                                              journal=journal, attachments=attachments, tools=tools,
                                              after_history=after_history))

    def run_event_turn(self, state: State, text: str, *, system: str | None = None, key: str | None = None,
                       pinned: bool = False, journal: TurnJournal | None = None,
                       tools: Sequence[Tool] = (), after_history: Sequence[str] = ()) -> TurnResult:
        """A turn in which the model answers a game event: the event joins the history as the game's (the model
        reads it framed as an event, never as the player's words), then the tool loop runs as in :meth:`run_turn`.
        With ``key`` the text also sets that fact. The player did not speak: the idle clock and the turn count
        stay (``meta.events`` counts it), and neither the idle gap nor a reset phrase applies. ``tools``: this
        turn's own and ``after_history`` this turn's texts after the history, as in :meth:`run_turn`."""
        return self._archived(self._event_turn(state, text, system=system, key=key, pinned=pinned, journal=journal,
                                               tools=tools, after_history=after_history))

    # --- events, compaction, splicing --------------------------------------------------------------

    def apply_event(self, state: State, text: str, *, pinned: bool = False, from_player: bool = False,
                    key: str | None = None, at: datetime | None = None) -> EventResult:
        """:meth:`append_to_state` with the details the worker needs. ``from_player``: the text is something the
        player sent (a location pin, a reaction), added as the player's words, not as a game event; it can never
        set a fact (``key``). ``at``: when it was sent (an aware datetime; the channel's), else the write's time."""
        return self._archived(self._event_applied(state, text, pinned=pinned, from_player=from_player, key=key,
                                                  at=at))

    def apply_messages(self, state: State, messages: Sequence[Message], *, from_player: bool = False,
                       facts: Sequence[tuple[str, str]] = ()) -> EventResult:
        """Add ``messages`` to the state with no model call: what the player said while a person had taken the
        conversation over (``from_player``: the idle clock moves, as for any message of theirs), or that person's
        own words (:func:`~worker.conversation.messages.operator`). The next turn's model reads them in order.
        ``facts`` (key, text), in order, set the facts a withheld keyed event carried (latest wins)."""
        return self._archived(self._messages_applied(state, messages, from_player=from_player, facts=facts))

    def needs_compaction(self, state: State) -> bool:
        """Whether the compactor's trigger fires on ``state``."""
        if self.compactor is None:
            return False
        return self.compactor.should_compact(self.load(state).state, self.counter)

    def compact_with_report(self, state: State) -> CompactionReport:
        """Apply the compactor to ``state`` (only the steps whose triggers fire) and report what changed:
        messages and tokens before and after, the steps applied, the errors and the pinned items dropped.
        A failure keeps the state."""
        return self._archived(self._compaction_report(state))

    def splice(self, newest: State, compacted: bytes) -> SpliceResult:
        """Lay a compaction result onto the newest state (see :mod:`worker.conversation.splice`)."""
        if isinstance(newest, Resident):  # rare (one per compaction): the blob the splice works on
            newest = encode_state(newest.state)
        return splice_blobs(newest, compacted, load=self.load, encode=self._encode)

    def _archived(self, result: _Departing) -> _Departing:
        """``result`` after what left the history went to :attr:`archive` (a reset phrase erased it)."""
        if self.archive is not None:
            # The conversation the turn reads (turn_context's, else the chat's own) is the one it writes.
            conversation_id = turn_conversation_id() or self.conversation_id
            if isinstance(result, TurnResult) and result.reset == "phrase":
                self.archive.erase(conversation_id)
            elif result.departed:
                self.archive.append(conversation_id, archived(conversation_id, result.departed))
        return result
