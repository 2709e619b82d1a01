"""Splicing: laying a compaction result onto the newest state.

The worker computes a compaction off to the side from an older state (the base) while turns and events
go on; the result is then laid onto whatever state is newest by then (invariant 6: a compaction never
loses a reply or blocks a turn). Messages added after the base (``seq`` at or beyond the compacted
state's ``next_seq``) are appended to the compacted history, and the newest counters and usage are kept.
A compaction is stale, and the newest state is kept unchanged, when the conversation was reset meanwhile
(another epoch) or another compaction was spliced first (another generation).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from worker.conversation.bounded import Encoded
from worker.conversation.messages import Message
from worker.conversation.recall.leaving import departed
from worker.conversation.state import ConversationState, LoadResult


@dataclass(frozen=True, slots=True)
class SpliceResult:
    """The outcome of laying a compaction result onto the newest state. ``applied`` is false when the
    compaction was stale (a reset or another compaction came first) and the newest state was kept.

    ``pinned_dropped`` counts the pinned items of the newest state that the spliced state no longer holds
    (the cap bit in the compaction or here). It is the count that lands, unlike
    ``CompactionReport.pinned_dropped``, which also counts for results that turn out stale.
    """

    state: bytes
    applied: bool
    reason: str = ""
    kept_new_messages: int = 0
    pinned_dropped: int = 0
    departed: tuple[Message, ...] = ()  # what left the newest state's history (none when stale): the splice archives


def _lay_onto(newest: ConversationState, compacted: ConversationState) -> ConversationState | str:
    """The compacted state with what ``newest`` gained since the base, or why the compaction is stale."""
    if newest.meta.epoch != compacted.meta.epoch:
        return "conversation was reset meanwhile"
    if compacted.generation != newest.generation + 1:
        return "another compaction came first"
    new_msgs = tuple(m for m in newest.messages if m.seq >= compacted.next_seq)
    saw_new = newest.seen_seq >= compacted.next_seq
    return replace(
        compacted,
        messages=compacted.messages + new_msgs,
        next_seq=newest.next_seq,
        seen_seq=newest.seen_seq,
        last_usage=newest.last_usage if saw_new else None,
        meta=replace(newest.meta, compactions=newest.meta.compactions + 1),
        facts=newest.facts,  # a fact set while the compaction ran replaces the one it started from
    )


def splice_blobs(newest: bytes | None, compacted: bytes, *, load: Callable[[bytes | None], LoadResult],
                 encode: Callable[[ConversationState], Encoded]) -> SpliceResult:
    """:func:`_lay_onto` over state blobs, decoded with ``load`` and written with ``encode``."""
    cur = load(newest)
    if cur.problem is not None or not newest:
        return SpliceResult(state=newest or b"", applied=False, reason="no usable newest state")
    comp = load(compacted)
    if comp.problem is not None:
        return SpliceResult(state=newest, applied=False, reason=f"compaction result unusable: {comp.problem}")
    merged = _lay_onto(cur.state, comp.state)
    if isinstance(merged, str):
        return SpliceResult(state=newest, applied=False, reason=merged)
    kept = sum(1 for m in cur.state.messages if m.seq >= comp.state.next_seq)
    lost = len(_pinned_seqs(cur.state) - _pinned_seqs(merged)) + len(set(cur.state.facts) - set(merged.facts))
    encoded = encode(merged)
    after = encoded.resident.state if encoded.resident is not None else merged
    return SpliceResult(state=encoded.blob, applied=True, kept_new_messages=kept,
                        pinned_dropped=lost + encoded.pinned_dropped, departed=departed(cur.state, after))


def _pinned_seqs(state: ConversationState) -> set[int]:
    return {m.seq for m in state.messages if m.pinned} | {m.seq for m in state.pinned}
