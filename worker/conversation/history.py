"""History structure: exchanges, safe cut points, and the last-line-of-defence repair.

An *exchange* is a run of context and user messages (events, mid-conversation system messages, the
user's text) followed by the model's side (assistant messages and their tool results). Cutting only at
the start of an exchange keeps every tool call with its results and makes the kept history start with a
user-side message, which every provider accepts.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Sequence
from dataclasses import dataclass, replace

from worker.conversation.messages import Message

log = logging.getLogger(__name__)

MODEL_SIDE = frozenset({"assistant", "tool"})


@dataclass(frozen=True, slots=True)
class Exchange:
    """``messages[start:end]`` of the history it was cut from."""

    start: int
    end: int

    def of(self, messages: Sequence[Message]) -> Sequence[Message]:
        return messages[self.start : self.end]


def starts_exchange(messages: Sequence[Message], i: int) -> bool:
    """Whether ``messages[i]`` (``i >= 1``) opens a new exchange: a user-side message after a model-side one."""
    return messages[i].role not in MODEL_SIDE and messages[i - 1].role in MODEL_SIDE


def exchanges(messages: Sequence[Message]) -> list[Exchange]:
    """Split a history into exchanges. A new exchange starts at a user-side message that follows a
    model-side one (or at the very start)."""
    out: list[Exchange] = []
    start = 0
    for i in range(1, len(messages)):
        if starts_exchange(messages, i):
            out.append(Exchange(start, i))
            start = i
    if messages:
        out.append(Exchange(start, len(messages)))
    return out


def is_successful_tool_exchange(msgs: Sequence[Message]) -> bool:
    """True when the exchange called tools and none of the results was an error."""
    results = [m for m in msgs if m.role == "tool"]
    return bool(results) and not any(m.is_error for m in results)


@dataclass(frozen=True, slots=True)
class Repair:
    """What :func:`repair_history` changed, in words, for the log."""

    problems: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.problems)


MISSING_RESULT = "No result was recorded for this tool call (the conversation history was repaired)."


@dataclass(frozen=True, slots=True)
class CleanPrefix:
    """A history :func:`repair_history` found valid, ending with no tool call waiting for its result, and the
    calls answered since its last assistant message (what repair remembers past that point). A history that
    starts with these same messages (the same objects: states only append) is repaired from where it ends."""

    messages: tuple[Message, ...]
    answered: frozenset[str]


def repair_history(messages: Sequence[Message]) -> tuple[list[Message], Repair]:
    """:func:`repair_from` without a known clean prefix."""
    fixed, repair, _ = repair_from(messages, None)
    return fixed, repair


def _clean_part(messages: Sequence[Message], clean: CleanPrefix | None) -> int:
    """How many leading messages ``clean`` vouches for: all of its own when ``messages`` starts with them."""
    if clean is None:
        return 0
    vouched = len(clean.messages)
    return vouched if vouched <= len(messages) and all(map(operator.is_, clean.messages, messages[:vouched])) else 0


def repair_from(messages: Sequence[Message],
                clean: CleanPrefix | None) -> tuple[list[Message], Repair, CleanPrefix | None]:
    """Make a history valid for every provider, or say that it already was; ``clean`` (from an earlier call on a
    history this one extends) skips what is known valid, so a turn checks only what was added.

    Rules: every tool call of an assistant message is answered by a tool result before the next
    non-tool message (a missing one gets an error result); a tool result without its call is dropped;
    duplicate results for one call are dropped; empty user-side messages are dropped; the history starts
    with a user-side message (leading model-side messages are dropped). Role alternation for providers
    that need it is the provider's job (it merges at request time), since it depends on the wire format.
    """
    problems: list[str] = []
    start = _clean_part(messages, clean)
    out: list[Message] = list(messages[:start])  # valid as it is: repair would copy it unchanged
    pending: dict[str, str] = {}  # call id -> tool name, awaiting a result
    answered: set[str] = set(clean.answered) if start and clean is not None else set()

    def close_pending() -> None:
        for call_id, name in pending.items():
            problems.append(f"tool call {call_id} ({name}) had no result; added an error result")
            out.append(Message(role="tool", content=MISSING_RESULT, tool_call_id=call_id, name=name, is_error=True))
        pending.clear()

    for m in messages[start:]:
        if m.role == "tool":
            cid = m.tool_call_id or ""
            if cid in pending:
                pending.pop(cid)
                answered.add(cid)
                out.append(m)
            elif cid in answered:
                problems.append(f"duplicate result for tool call {cid} dropped")
            else:
                problems.append(f"tool result {cid!r} without its call dropped")
            continue
        close_pending()
        if m.role == "assistant":
            if not out:
                problems.append("leading assistant message dropped")
                continue
            if not m.content.strip() and not m.tool_calls:
                problems.append("empty assistant message dropped")
                continue
            out.append(m)
            answered.clear()
            for call in m.tool_calls:
                pending[call.id] = call.name
            continue
        if not m.content.strip() and m.media is None:  # a photo without a caption is not empty
            problems.append(f"empty {m.role} message dropped")
            continue
        out.append(m)
    if not problems and not pending and all(m.seq for m in messages[start:]):
        return out, Repair(()), CleanPrefix(tuple(messages), frozenset(answered))
    close_pending()
    if problems:
        log.warning("history repaired before a request", extra={"problems": problems})
    return _with_seqs(out), Repair(tuple(problems)), None


def _with_seqs(messages: list[Message]) -> list[Message]:
    """Results a repair added have no seq: each gets its call's, so ordering by seq stays stable."""
    fixed: list[Message] = []
    last_seq = 0
    for m in messages:
        if m.seq == 0 and last_seq:
            m = replace(m, seq=last_seq)
        last_seq = m.seq or last_seq
        fixed.append(m)
    return fixed
