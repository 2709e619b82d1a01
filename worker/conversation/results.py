"""What the :class:`~worker.conversation.chat.Chat` methods the worker calls return.

``pinned_dropped`` on each result counts pinned items that went because the cap (``Chat.max_pinned``) or
the state's size limit bit; the core does no I/O, so the caller counts it. The worker's
``parley_pinned_dropped_total`` adds it from what it commits: :class:`TurnResult`, :class:`EventResult`
and an applied :class:`~worker.conversation.splice.SpliceResult`. ``CompactionReport.pinned_dropped`` is
for the report only: the result may turn out stale, and its splice counts what lands.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from worker.conversation.messages import Message
from worker.conversation.model import FinishReason, Usage
from worker.conversation.resident import Resident
from worker.envelopes.reply_parts import out_part, render_all
from worker.errors import StateDecodeError


@dataclass(frozen=True, slots=True)
class TurnResult:
    """Everything a turn produced.

    - ``reply``: the text for the user (never empty, unless tools added ``parts`` and the model wrote nothing after).
    - ``state``: the new state blob.
    - ``finish_reason``: of the last model call (``"stop"`` for a reset answered without the model).
    - ``truncated``: the model hit its output limit; ``reply`` is what it wrote so far.
    - ``filtered``: the provider's content filter or a refusal ended the answer.
    - ``tool_limit_hit``: ``max_tool_iterations`` was reached; the model was asked to answer without tools.
    - ``state_problem``: the incoming blob was unusable (``reason`` says why) and the turn started fresh;
      the worker quarantines the old blob.
    - ``reset``: ``"idle_gap"`` or ``"phrase"`` when the turn started a new conversation.
    - ``needs_compaction``: the compactor's trigger fires on the new state.
    - ``pinned_dropped``: pinned items dropped to keep the new state within its limits.
    - ``model_calls`` / ``tool_calls``: the calls this run made; ``replayed_rounds`` / ``replayed_results``: the
      model rounds and tool results a retried turn took from its journal instead (so were not made again).
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
    pinned_dropped: int = 0
    replayed_rounds: int = 0
    replayed_results: int = 0
    resident: Resident | None = None  # ``state`` decoded, for the next turn (see worker.conversation.resident)
    # Sent before ``reply``, in order: what reply tools and game tools added (texts, and parts in their JSON form);
    # ``reply`` may then be empty (the parts were the answer).
    parts: tuple[str | dict[str, Any], ...] = ()
    # Where ``reply`` is in ``state`` (:func:`worker.conversation.inspect.reply_mark`): what the trace keeps in place of
    # the texts; None when the state does not hold the reply.
    reply_at: str | None = None
    # The messages that left the verbatim history on the way to ``state`` (a compaction, the size bound, an idle
    # reset; see worker.conversation.recall.leaving), oldest first: what the commit of ``state`` archives. A reset
    # phrase leaves none: it erases the archive.
    departed: tuple[Message, ...] = ()

    @property
    def text(self) -> str:
        """The whole reply as text, for a caller that sends text only (the contract's ``chat_with_state``): what
        the tools added, rendered as the state keeps it (a pin as ``[location: Harrogate Theatre (53.99, -1.54)]``,
        buttons as their body and ``[buttons: Yes | No]``), then ``reply``, a blank line apart. Never empty when
        parts were the answer; ``reply`` itself when no tool added any."""
        if not self.parts:
            return self.reply
        return render_all([out_part(p) for p in (*self.parts, *((self.reply,) if self.reply else ()))])


@dataclass(frozen=True, slots=True)
class EventResult:
    """What adding an event produced: the new state, and the same flags as :class:`TurnResult`."""

    state: bytes
    state_problem: StateDecodeError | None = None
    needs_compaction: bool = False
    pinned_dropped: int = 0
    resident: Resident | None = None
    departed: tuple[Message, ...] = ()  # as :attr:`TurnResult.departed`


@dataclass(frozen=True, slots=True)
class CompactionReport:
    """What a compaction did. ``changed`` is false when nothing was due or every step failed; ``errors``
    holds one line per failed step (``"<step>: bug: ..."`` for an unexpected exception)."""

    state: bytes
    changed: bool
    applied: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    messages_before: int = 0
    messages_after: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    state_problem: StateDecodeError | None = None
    pinned_dropped: int = 0
    usage: Usage | None = None  # what the compaction's model calls (the summariser's) used, as reported
    model: str | None = None  # the model that made them
    # The messages this compaction takes out of the verbatim history (archived by the commit that lands it: the
    # splice's, or the retried turn's after a context overflow; a library Chat with an archive appends them here).
    departed: tuple[Message, ...] = ()

    @property
    def archived(self) -> int:
        """How many messages the compaction sends to the archive."""
        return len(self.departed)
