"""Building the request a model sees: the preamble (system prompt, pinned items, summary), the history, and what
goes after the history.

Where each part sits is chosen for the providers' prompt caches, which bill a request's prefix shared with an
earlier request at a fraction of the price: the preamble holds only what changes when compaction runs (the pinned
items, which leave the history only then, and the rolling summary), so between compactions each request starts with
the previous one. The game's keyed facts change at any time: they go after the history (:func:`render_after_history`),
where a change costs only their own few tokens instead of the whole history after them. ``facts="preamble"`` keeps
the earlier layout (the summary, then the pinned items and the facts, all in the preamble).

``facts="changes_after_history"`` (the worker's default) splits them: the facts as they were when the preamble was
last rewritten anyway (:attr:`~worker.conversation.state.ConversationState.preamble_facts`, taken at each compaction
that changes the summary, the pinned items or the history's start) are in the preamble, and only the facts that
changed since go after the history. A fact sent again with every request costs its tokens every time (about 3% of a
game's prompt tokens); this way only a changed one does, until the next compaction. The model must never be left
with two values of a fact and no way to tell which holds: each fact is shown with its key, and the block after the
history says that its facts replace those of the same key in the preamble.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from worker.conversation.messages import Message, transcript_text
from worker.conversation.state import ConversationState, Fact
from worker.conversation.tokens import TokenCounter

SUMMARY_HEADING = "Summary of the earlier conversation:"
PINNED_HEADING = "Facts to keep in mind (pinned):"
FACTS_HEADING = "Current facts (the game keeps these up to date):"
# Sent with every request, so short; but both say which value holds. The preamble's facts are current when the
# request is made unless the block after the history updates one: an older value in an event of the history (an
# answered keyed event kept verbatim by the compaction that took the newer value into the preamble) must not read
# as newer than the preamble's.
SETTLED_FACTS_HEADING = "Current facts (the game keeps these up to date; one updated at the end replaces it):"
CHANGED_FACTS_HEADING = "Updated facts (each replaces the fact of the same [key] above):"

FactPlacement = Literal["changes_after_history", "after_history", "preamble"]
DEFAULT_FACT_PLACEMENT: FactPlacement = "changes_after_history"


def _lines(items: Sequence[str]) -> str:
    return "\n".join(f"- {text}" for text in items)


def _keyed(items: Sequence[Fact]) -> str:
    return "\n".join(f"- [{f.key}] {f.text}" for f in items)


def settled_facts(state: ConversationState) -> tuple[list[Fact], list[Fact]]:
    """The facts the preamble shows (those of :attr:`~ConversationState.preamble_facts` whose key the game still
    keeps: the cap may have dropped one) and those that changed since (a new key or a new text), in the order of
    ``state.facts``."""
    current = {f.key for f in state.facts}
    settled = [f for f in state.preamble_facts if f.key in current]
    kept = set(settled)
    return settled, [f for f in state.facts if f not in kept]


def render_preamble(system: str | None, state: ConversationState, extra: Sequence[str] = (),
                    facts: FactPlacement = DEFAULT_FACT_PLACEMENT) -> str | None:
    """The system prompt given for this turn, then leading system messages, then the pinned items and the rolling
    summary (with ``facts="preamble"``: the summary, then the pinned items and the keyed facts; with
    ``facts="changes_after_history"``: the facts as of the preamble's last rewrite, keyed, between the pinned items
    and the summary). ``None`` when there is nothing to say."""
    parts: list[str] = []
    if system and system.strip():
        parts.append(system.strip())
    parts.extend(s.strip() for s in extra if s.strip())
    summary = f"{SUMMARY_HEADING}\n{state.summary.strip()}" if state.summary.strip() else ""
    pinned = [transcript_text(m) for m in state.pinned]
    if facts == "preamble":
        pinned += [f.text for f in state.facts]
        parts += [summary] if summary else []
    if pinned:
        parts.append(f"{PINNED_HEADING}\n{_lines(pinned)}")
    if facts == "changes_after_history" and (settled := settled_facts(state)[0]):
        parts.append(f"{SETTLED_FACTS_HEADING}\n{_keyed(settled)}")
    if facts != "preamble" and summary:
        parts.append(summary)
    return "\n\n".join(parts) or None


def stable_chars(system: str | None, extra: Sequence[str] = ()) -> int:
    """How many characters at the start of :func:`render_preamble`'s text are the turn's own prompt (``system`` and
    ``extra``): what stays the same when compaction changes the pinned items or the summary after it."""
    return len(render_preamble(system, ConversationState(provider=""), extra) or "")


def render_after_history(state: ConversationState, after: Sequence[str] = (),
                         facts: FactPlacement = DEFAULT_FACT_PLACEMENT) -> str | None:
    """What goes after the history for this request: the keyed facts (with ``facts="changes_after_history"`` those
    changed since the preamble's facts, keyed; none with ``facts="preamble"``), then the ``after`` texts (a live game
    context placed there). ``None`` when there is nothing."""
    parts: list[str] = []
    if facts == "after_history" and state.facts:
        parts.append(f"{FACTS_HEADING}\n{_lines([f.text for f in state.facts])}")
    elif facts == "changes_after_history" and state.facts:
        settled, changed = settled_facts(state)
        if changed:
            heading = CHANGED_FACTS_HEADING if settled else FACTS_HEADING
            parts.append(f"{heading}\n{_keyed(changed)}")
    parts.extend(s.strip() for s in after if s.strip())
    return "\n\n".join(parts) or None


def history_tokens(state: ConversationState, counter: TokenCounter) -> int:
    """Tokens of what the state contributes to a prompt: history, summary and pinned items."""
    total = counter.count_messages(state.messages)
    if state.summary:
        total += counter.count_text(state.summary) + 8
    total += sum(counter.count_text(m.content) + 2 for m in state.pinned)
    total += sum(counter.count_text(f.text) + 2 for f in state.facts)
    return total


def _unseen(messages: Sequence[Message], seen_seq: int) -> list[Message]:
    return [m for m in messages if m.seq > seen_seq]


def prompt_tokens(state: ConversationState, counter: TokenCounter) -> int:
    """The prompt size the next request will have, as well as we know it.

    When the provider reported usage for the last round trip, that figure (which includes the system
    prompt and tool definitions we do not store) plus an estimate of what was added since; otherwise a
    counted estimate of the stored parts.
    """
    if state.last_usage is not None and state.last_usage.prompt_tokens > 0:
        added = _unseen(state.messages, state.seen_seq)
        return state.last_usage.prompt_tokens + counter.count_messages(added)
    return history_tokens(state, counter)


def fixed_overhead(state: ConversationState, counter: TokenCounter) -> int:
    """Tokens of the prompt that are not stored (system prompt, tool schemas), inferred from usage."""
    if state.last_usage is None or state.last_usage.prompt_tokens <= 0:
        return 0
    seen = [m for m in state.messages if m.seq <= state.seen_seq]
    stored = counter.count_messages(seen) + (counter.count_text(state.summary) + 8 if state.summary else 0)
    stored += sum(counter.count_text(m.content) + 2 for m in state.pinned)
    stored += sum(counter.count_text(f.text) + 2 for f in state.facts)
    return max(0, state.last_usage.prompt_tokens - stored)
