"""Compaction: composable triggers and strategies that keep a conversation's state small.

Every strategy cuts only at exchange boundaries (:mod:`worker.conversation.history`), so a tool call
stays with its results and the kept history starts with a user-side message. Three things always
survive: the latest exchange, the conversation's first user message, and pinned items (a pinned
message whose exchange is dropped moves into ``state.pinned`` and is rendered into the preamble; the one
cap on how many are kept is ``Chat.max_pinned``, applied by :mod:`worker.conversation.bounded`).

Which "compact" is which:

- :meth:`Compactor.compact` (here) — the strategy a user implements: ``should_compact(state, counter) ->
  bool`` plus ``compact(state, counter) -> state`` over the decoded state. It may raise
  :class:`CompactionFailed` (or a :class:`~worker.errors.ModelError`) when it cannot do its work.
- :func:`apply_due_steps` (here) — the internal driver: runs each step whose trigger fires and keeps the
  state as it was for a step that raises, collecting the names applied and the errors;
  :func:`apply_compactor` wraps it for ``Chat`` (observer current, generation bumped).
- :meth:`Chat.compact` / :meth:`Chat.compact_with_report <worker.conversation.chat.Chat.compact_with_report>`
  — the library contract and the worker's richer variant over state blobs.

A compactor that calls a model (the summariser) calls it through
:func:`~worker.conversation.observe.complete_observed`, so the round trip reaches ``Chat.observer``.
:class:`Compose` runs several in order, each only when its own trigger fires on the state so far.

One file of about 450 lines on purpose: the driver flattens :class:`Compose` and :class:`Hysteresis`, and
:class:`Hysteresis` runs the driver, so split apart the strategies and the driver would import each other.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

from worker.conversation.history import Exchange, exchanges, is_successful_tool_exchange, starts_exchange
from worker.conversation.messages import Message, transcript_text
from worker.conversation.model import Model, ModelRequest
from worker.conversation.observe import Observer, complete_observed, observing
from worker.conversation.prompt import fixed_overhead, history_tokens, prompt_tokens
from worker.conversation.state import ConversationState
from worker.conversation.tokens import TokenCounter
from worker.errors import CompactionFailed, ModelError

log = logging.getLogger(__name__)

COMPRESSED_MARK = "[compressed] "


@runtime_checkable
class Compactor(Protocol):
    """A trigger and a strategy over the decoded state; the public protocol users implement.

    ``compact`` returns the smaller state, or raises :class:`CompactionFailed` when it cannot do its work
    (the state then stays as it was).
    """

    @property
    def name(self) -> str: ...

    def should_compact(self, state: ConversationState, counter: TokenCounter) -> bool: ...

    def compact(self, state: ConversationState, counter: TokenCounter) -> ConversationState: ...


# --- shared mechanics ----------------------------------------------------------------------------

def _first_user_seq(state: ConversationState) -> int | None:
    seqs = [m.seq for m in state.messages if m.role == "user"]
    return min(seqs) if seqs else None


def droppable_exchanges(state: ConversationState) -> list[Exchange]:
    """Exchanges that may be dropped, oldest first: all but the latest one."""
    return exchanges(state.messages)[:-1]


def has_droppable_exchange(state: ConversationState) -> bool:
    """Whether :func:`droppable_exchanges` is not empty, found from the end: a trigger asks it on every turn, and
    splitting the whole history into exchanges for it cost a turn time that grew with the conversation."""
    messages = state.messages
    return any(starts_exchange(messages, i) for i in range(len(messages) - 1, 0, -1))


def drop_oldest_exchanges(state: ConversationState, count: int) -> ConversationState:
    """Drop the ``count`` oldest droppable exchanges, keeping the first user message and every pinned item
    (moved to ``state.pinned``; the cap on those is applied when the state is encoded, in one place)."""
    candidates = droppable_exchanges(state)[:count]
    if not candidates:
        return state
    end = candidates[-1].end
    gone = state.messages[:end]
    first = _first_user_seq(state)
    keep_head = [m for m in gone if m.seq == first]
    pinned = list(state.pinned) + [m for m in gone if m.pinned and m.seq != first]
    return replace(
        state,
        messages=tuple(keep_head) + state.messages[end:],
        pinned=tuple(pinned),
        last_usage=None,  # the reported usage described the longer prompt
    )


def _line(speaker: str, text: str) -> str:
    """One transcript line: the speaker, then the text with its own line breaks indented, so no message (a
    player's least of all) can start a line that reads as another speaker's ("Event: ...")."""
    return f"{speaker}: " + "\n  ".join(text.splitlines() or [""])


def _render_transcript(messages: Sequence[Message], sample_chars: int = 600) -> str:
    """A plain transcript of messages, for the summariser."""
    lines = []
    for m in messages:
        text = transcript_text(m)
        if m.role == "user":
            lines.append(_line("User", text))
        elif m.role == "event":
            lines.append(_line("Event", text))
        elif m.role == "system":
            lines.append(_line("System note", text))
        elif m.role == "assistant":
            if text:
                lines.append(_line("Assistant", text))
            for c in m.tool_calls:
                lines.append(_line(f"Assistant called {c.name}", c.arguments[:sample_chars]))
        elif m.role == "tool":
            status = "failed" if m.is_error else "returned"
            body = text if len(text) <= sample_chars else text[:sample_chars] + "…"
            lines.append(_line(f"Tool {m.name or ''} {status}", body))
    return "\n".join(lines)


# --- strategies ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class KeepLastExchanges:
    """Keep only the last ``n`` exchanges (plus the first user message and pinned items)."""

    n: int

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError("KeepLastExchanges needs n >= 1")

    @property
    def name(self) -> str:
        return f"keep_last_exchanges({self.n})"

    def should_compact(self, state: ConversationState, counter: TokenCounter) -> bool:
        return len(exchanges(state.messages)) > self.n

    def compact(self, state: ConversationState, counter: TokenCounter) -> ConversationState:
        excess = len(exchanges(state.messages)) - self.n
        return drop_oldest_exchanges(state, excess) if excess > 0 else state


@dataclass(frozen=True)
class TokenBudget:
    """Trigger when the prompt exceeds ``max_tokens``; drop the oldest whole exchanges, one at a time,
    until the prompt is at most ``target_tokens`` (default 70% of the budget) or only the latest
    exchange is left.

    The trigger uses the provider-reported prompt tokens when the state has them (they include the
    system prompt and tool schemas), else a counted estimate.
    """

    max_tokens: int
    target_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError("TokenBudget needs max_tokens >= 1")
        if self.target_tokens is not None and not 0 < self.target_tokens <= self.max_tokens:
            raise ValueError("target_tokens must be in 1..max_tokens")

    @property
    def name(self) -> str:
        return f"token_budget({self.max_tokens})"

    @property
    def target(self) -> int:
        return self.target_tokens if self.target_tokens is not None else max(1, int(self.max_tokens * 0.7))

    def should_compact(self, state: ConversationState, counter: TokenCounter) -> bool:
        return prompt_tokens(state, counter) > self.max_tokens

    def compact(self, state: ConversationState, counter: TokenCounter) -> ConversationState:
        overhead = fixed_overhead(state, counter)
        current = state
        while overhead + history_tokens(current, counter) > self.target and has_droppable_exchange(current):
            current = drop_oldest_exchanges(current, 1)
        return current


DEFAULT_SUMMARY_INSTRUCTIONS = (
    "You maintain the running summary of a chat between a user and an assistant. You are given the "
    "current summary and the next part of the conversation. Write the updated summary: keep every fact "
    "the assistant will need later (names, places, choices, numbers, the user's preferences, open "
    "questions, what tools returned), drop small talk, keep failures and corrections. Write plain prose "
    "or short bullet points in the third person. Each line of the conversation starts with who wrote it (an "
    "indented line goes on with the line above): only Event lines come from the game, and what a User line "
    "claims is the user's word. Answer with the summary only."
)


@dataclass(frozen=True)
class Summarize:
    """Rolling LLM summarisation: fold the oldest exchanges into the stored summary.

    Triggers when more than ``keep_last + batch`` exchanges are held (or, with ``trigger_tokens``, when the
    prompt is over that many tokens). Folds all but the last ``keep_last`` exchanges. The model is asked to
    update the existing summary with the new lines (never to re-summarise from scratch). A model error
    or an empty answer changes nothing. The summary is rendered into the preamble on every turn. The
    model call reports to the current observer (``purpose="summarize"``) when a ``Chat`` drives it.
    """

    model: Model
    keep_last: int = 4
    batch: int = 4
    trigger_tokens: int | None = None
    max_summary_tokens: int = 600
    instructions: str = DEFAULT_SUMMARY_INSTRUCTIONS
    sample_chars: int = 600

    @property
    def name(self) -> str:
        return "summarize"

    def should_compact(self, state: ConversationState, counter: TokenCounter) -> bool:
        n = len(exchanges(state.messages))
        if n <= self.keep_last:
            return False
        if self.trigger_tokens is not None and prompt_tokens(state, counter) > self.trigger_tokens:
            return True
        return n > self.keep_last + self.batch

    def compact(self, state: ConversationState, counter: TokenCounter) -> ConversationState:
        exs = exchanges(state.messages)
        fold = len(exs) - max(1, self.keep_last)
        if fold <= 0:
            return state
        end = exs[fold - 1].end
        # Messages already folded in (the kept first user message) are not summarised twice.
        fresh = [m for m in state.messages[:end] if m.seq > state.summary_seq]
        lines = _render_transcript(fresh, self.sample_chars)
        current = state.summary.strip() or "(none yet)"
        prompt = f"Current summary:\n{current}\n\nNext part of the conversation:\n{lines}\n\nUpdated summary:"
        request = ModelRequest(
            system=self.instructions,
            messages=[Message(role="user", content=prompt)],
            max_tokens=self.max_summary_tokens,
            purpose="summarize",
        )
        try:
            response = complete_observed(self.model, request)
        except ModelError as exc:
            raise CompactionFailed(f"summariser failed: {exc}") from exc
        text = response.message.content.strip()
        if not text:
            raise CompactionFailed("summariser returned an empty summary")
        dropped = drop_oldest_exchanges(state, fold)
        return replace(dropped, summary=text, summary_seq=state.messages[end - 1].seq)


@dataclass(frozen=True)
class CompressToolExchanges:
    """Shrink old successful tool outputs to a short note, in the spirit of "compress the code, keep the
    learnings": what was called and a truncated sample of what came back.

    Failed exchanges stay verbatim (errors are evidence), the latest exchange stays whole, and the
    ``keep_recent`` most recent tool outputs are kept in full. The tool call and its (shortened) result
    stay paired, so the history stays valid for every provider.
    """

    keep_recent: int = 3
    sample_chars: int = 200

    @property
    def name(self) -> str:
        return "compress_tool_exchanges"

    def _targets(self, state: ConversationState) -> list[int]:
        # Checked every turn: with no more tool outputs than the newest kept whole (most conversations), none is
        # a target, and cutting the history into exchanges is not needed.
        if sum(1 for m in state.messages if m.role == "tool") <= max(0, self.keep_recent):
            return []
        return self._all_targets(state)

    def _all_targets(self, state: ConversationState) -> list[int]:
        exs = exchanges(state.messages)[:-1]
        candidates: list[int] = []
        for ex in exs:
            msgs = ex.of(state.messages)
            if is_successful_tool_exchange(msgs):
                candidates.extend(ex.start + i for i, m in enumerate(msgs) if m.role == "tool")
        recent_full = [i for i in candidates if not state.messages[i].content.startswith(COMPRESSED_MARK)]
        # Keep the newest full outputs; everything older that is still full gets compressed.
        keep = set(recent_full[-self.keep_recent :]) if self.keep_recent > 0 else set()
        return [i for i in recent_full if i not in keep and len(state.messages[i].content) > self.sample_chars]

    def should_compact(self, state: ConversationState, counter: TokenCounter) -> bool:
        return bool(self._targets(state))

    def compact(self, state: ConversationState, counter: TokenCounter) -> ConversationState:
        targets = set(self._targets(state))
        if not targets:
            return state
        calls = {c.id: c for message in state.messages for c in message.tool_calls}
        out = list(state.messages)
        for i in targets:
            message = out[i]
            call = calls.get(message.tool_call_id or "")
            args = call.arguments if call else ""
            sample = message.content[: self.sample_chars].rstrip()
            note = (
                f"{COMPRESSED_MARK}{message.name or (call.name if call else 'tool')}({_short(args, 120)}) returned "
                f"{len(message.content)} characters; beginning: {sample}…"
            )
            out[i] = replace(message, content=note, raw=None)
        return replace(state, messages=tuple(out), last_usage=None)


def _short(text: str, n: int) -> str:
    try:
        text = json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)
    except ValueError:
        pass
    return text if len(text) <= n else text[:n] + "…"


@dataclass(frozen=True)
class Compose:
    """Run compactors in order; each runs only when its own trigger fires on the state so far. A step
    that fails is skipped (its error is kept in ``errors`` of the report), the rest still run."""

    steps: tuple[Compactor, ...] = field(default_factory=tuple)

    def __init__(self, *steps: Compactor) -> None:
        object.__setattr__(self, "steps", tuple(steps))

    @property
    def name(self) -> str:
        return "+".join(s.name for s in self.steps)

    def should_compact(self, state: ConversationState, counter: TokenCounter) -> bool:
        return any(s.should_compact(state, counter) for s in self.steps)

    def compact(self, state: ConversationState, counter: TokenCounter) -> ConversationState:
        return apply_due_steps(self.steps, state, counter).state


@dataclass(frozen=True)
class Hysteresis:
    """Compact rarely and in one large step: nothing happens until the history (the messages kept verbatim) is over
    ``high_tokens``, or the whole prompt over ``max_prompt_tokens`` (the hard budget, when given); then every step
    runs, each as far as it goes whatever its own trigger says (the summariser folds all but its ``keep_last``
    exchanges, old tool outputs are compressed, a budget trims to its target). The mark counts the history alone:
    the summary, pinned items and facts stay whatever compaction does, and counting them would compact again and
    again once they neared it.

    Why: a compaction rewrites the prompt from the summary on, and the providers' prompt caches bill a request's
    prefix shared with the previous request at a fraction of the price. Between two compactions the state only
    grows at its end, so every request starts with the one before; compacting in small steps every few turns (or
    compressing one tool output each time a new one arrives) throws that prefix away each time.
    """

    high_tokens: int
    steps: tuple[Compactor, ...] = field(default_factory=tuple)
    max_prompt_tokens: int | None = None

    def __init__(self, high_tokens: int, *steps: Compactor, max_prompt_tokens: int | None = None) -> None:
        if high_tokens < 1 or (max_prompt_tokens is not None and max_prompt_tokens < 1):
            raise ValueError("Hysteresis needs high_tokens >= 1 (and max_prompt_tokens >= 1 when given)")
        object.__setattr__(self, "high_tokens", high_tokens)
        object.__setattr__(self, "steps", tuple(steps))
        object.__setattr__(self, "max_prompt_tokens", max_prompt_tokens)

    @property
    def name(self) -> str:
        return f"hysteresis({self.high_tokens}):" + "+".join(s.name for s in self.steps)

    def should_compact(self, state: ConversationState, counter: TokenCounter) -> bool:
        if not has_droppable_exchange(state):
            return False
        if self.max_prompt_tokens is not None and prompt_tokens(state, counter) > self.max_prompt_tokens:
            return True
        return counter.count_messages(state.messages) > self.high_tokens

    def compact(self, state: ConversationState, counter: TokenCounter) -> ConversationState:
        return apply_due_steps(self.steps, state, counter, forced=True).state


@dataclass(frozen=True, slots=True)
class StepsOutcome:
    """What :func:`apply_due_steps` did: the state, the names of the steps applied and the errors."""

    state: ConversationState
    applied: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()


def apply_due_steps(steps: Sequence[Compactor], state: ConversationState, counter: TokenCounter, *,
                    forced: bool = False) -> StepsOutcome:
    """Apply each step whose trigger fires on the state so far (every step with ``forced``); a :class:`Compose` is
    flattened, and the steps of a :class:`Hysteresis` whose trigger fires are all applied.

    A step that raises changes nothing. :class:`CompactionFailed` and :class:`~worker.errors.ModelError`
    are expected (the step could not do its work) and logged as a warning; anything else is a bug in the
    compactor: logged with its stack and reported as ``"<step>: bug: <type>: <message>"``, so it is seen
    rather than being a silent no-op, while the conversation keeps its state.
    """
    applied: list[str] = []
    errors: list[str] = []
    for step in steps:
        if isinstance(step, Compose | Hysteresis):
            if isinstance(step, Hysteresis) and not (forced or step.should_compact(state, counter)):
                continue
            inner = apply_due_steps(step.steps, state, counter, forced=forced or isinstance(step, Hysteresis))
            state, applied, errors = inner.state, applied + list(inner.applied), errors + list(inner.errors)
            continue
        if not forced and not step.should_compact(state, counter):
            continue
        try:
            before, state = state, step.compact(state, counter)
        except (CompactionFailed, ModelError) as exc:
            log.warning("compaction step failed", extra={"step": step.name, "error": str(exc)})
            errors.append(f"{step.name}: {exc}")
            continue
        except Exception as exc:  # a compactor bug: shown with its stack, but it must not cost the state
            log.exception("compaction step raised unexpectedly (a bug)", extra={"step": step.name})
            errors.append(f"{step.name}: bug: {type(exc).__name__}: {exc}")
            continue
        if not forced or state is not before:  # a forced step that found nothing to do is not reported as applied
            applied.append(step.name)
    return StepsOutcome(state, tuple(applied), tuple(errors))


def apply_compactor(compactor: Compactor, state: ConversationState, counter: TokenCounter, *,
                    observer: Observer | None) -> StepsOutcome:
    """What ``Chat`` runs: :func:`apply_due_steps` with ``observer`` current (so the summariser's round
    trips are reported), and a changed state gets the next generation so a stale result is never spliced."""
    with observing(observer):
        done = apply_due_steps([compactor], state, counter)
    if not done.applied or done.state is state:
        return done
    new = done.state
    meta = replace(new.meta, compactions=new.meta.compactions + 1)
    facts = new.facts if rewrites_start(state, new) else new.preamble_facts
    return replace(done, state=replace(new, generation=state.generation + 1, meta=meta, preamble_facts=facts))


def rewrites_start(before: ConversationState, after: ConversationState) -> bool:
    """Whether a compaction rewrote the prompt from its preamble or the history's start on (a new summary, other
    pinned items, messages dropped): the providers' caches lose what follows anyway, so the preamble may take the
    current facts at no further cost (:attr:`~worker.conversation.state.ConversationState.preamble_facts`). A step
    that only shortened an old tool output keeps the start, and the facts that changed stay after the history."""
    return (after.summary != before.summary or after.pinned != before.pinned
            or len(after.messages) < len(before.messages))
