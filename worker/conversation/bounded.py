"""The size-bounded encoder: the state codec plus the two limits every stored state keeps.

:func:`encode_bounded` is the only way :class:`~worker.conversation.chat.Chat` writes a state, so the
limits hold in one place:

- ``max_pinned`` — the one cap on pinned items (``state.pinned``, the pinned messages whose exchange was
  compacted away). Compactors move pinned items there without a cap of their own; here the oldest beyond
  the cap go, and :attr:`Encoded.pinned_dropped` counts them so the caller can report it (the core does
  no I/O of its own).
- ``max_bytes`` — the encoded size. Over it, the oldest exchanges go first (pinned items among them move
  to ``state.pinned``); when the latest exchange alone is too big (a huge tool output), it is slimmed to
  its words, pinned messages kept whole. Only when the pinned items themselves do not fit are the oldest
  of them dropped, and counted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from worker.conversation.compaction import drop_oldest_exchanges, has_droppable_exchange
from worker.conversation.history import CleanPrefix, exchanges
from worker.conversation.messages import Message
from worker.conversation.resident import Resident
from worker.conversation.state import FORMAT_VERSION, ConversationState, Memo, encode_with_memo
from worker.conversation.tokens import CountedPrefix

log = logging.getLogger(__name__)

_SLIM_CHARS = 2000
_SLIM_SUMMARY_CHARS = 8000


@dataclass(frozen=True, slots=True)
class Encoded:
    """An encoded state, how many pinned items had to go to keep it within its limits, and the state as encoded
    (decoded, for the worker to keep between turns)."""

    blob: bytes
    pinned_dropped: int = 0
    resident: Resident | None = None


def _cap_pinned(state: ConversationState, max_pinned: int) -> tuple[ConversationState, int]:
    """Keep at most ``max_pinned`` of ``state.pinned`` and ``state.facts`` together; returns the state and how many
    went. The oldest pinned items go first, and keyed facts only once no pinned item is left: a fact is the game's
    current truth (the target), replaced rather than piling up, while a pinned item is a piece of the past."""
    over = len(state.pinned) + len(state.facts) - max(0, max_pinned)
    if over <= 0:
        return state, 0
    log.warning("pinned items over the cap; dropping the oldest", extra={"dropped": over, "cap": max_pinned})
    pins = min(over, len(state.pinned))
    return replace(state, pinned=state.pinned[pins:], facts=state.facts[over - pins:]), over


def encode_bounded(state: ConversationState, *, max_bytes: int, max_pinned: int, memo: Memo | None = None,
                   clean: CleanPrefix | None = None, counted: CountedPrefix | None = None,
                   version: int = FORMAT_VERSION) -> Encoded:
    """Encode ``state`` within ``max_pinned`` pinned items and ``max_bytes`` bytes (see the module); ``memo`` is
    the previous encoding's (only the new messages are packed), ``clean`` how much of the history the turn's last
    request found valid and ``counted`` the history's last token count (both kept with the resident for the next
    turn); ``version`` the format written."""
    state, dropped = _cap_pinned(state, max_pinned)
    blob, memo = encode_with_memo(state, memo, version=version)
    if len(blob) > max_bytes and memo.written_from:
        blob, memo = encode_with_memo(state, version=version)  # frames are not compressed: written whole, it may fit

    def encode_state(st: ConversationState) -> bytes:
        nonlocal memo
        out, memo = encode_with_memo(st, version=version)
        return out

    while len(blob) > max_bytes and has_droppable_exchange(state):
        log.warning("state over its size limit; dropping the oldest exchange",
                    extra={"bytes": len(blob), "limit": max_bytes})
        state, more = _cap_pinned(drop_oldest_exchanges(state, 1), max_pinned)
        dropped += more
        blob = encode_state(state)
    if len(blob) > max_bytes:
        state, more = _cap_pinned(_slim(state), max_pinned)
        dropped += more
        blob = encode_state(state)
    while len(blob) > max_bytes and (state.pinned or state.facts):
        log.warning("pinned items alone are over the state's size limit; dropping the oldest",
                    extra={"bytes": len(blob), "limit": max_bytes})
        state = replace(state, pinned=state.pinned[1:]) if state.pinned else replace(state, facts=state.facts[1:])
        dropped += 1
        blob = encode_state(state)
    # What the resident takes in memory, about: the stored blob plus the decoded messages (measured with
    # tracemalloc at 2.6 KB for a one-turn conversation and 5x the packed size for longer ones).
    size = 5 * memo.raw + len(memo.stored) + 2048
    return Encoded(blob, dropped, Resident(state, memo, size, clean, counted))


def _slim(state: ConversationState) -> ConversationState:
    """Keep only the words of the latest exchange: user text, events and the assistant's text answer."""
    last = exchanges(state.messages)[-1].of(state.messages) if state.messages else []
    last_seqs = {m.seq for m in last}
    # Pinned messages outside the latest exchange (the kept first user message may be one) stay pinned.
    orphans = tuple(m for m in state.messages if m.pinned and m.seq not in last_seqs)
    slim = [
        Message(role=m.role, content=m.content if m.pinned else m.content[:_SLIM_CHARS], pinned=m.pinned,
                media=m.media, at=m.at)
        for m in last
        if m.role in ("user", "event") or (m.role == "assistant" and not m.tool_calls)
    ]
    return replace(state, messages=(), pinned=state.pinned + orphans,
                   summary=state.summary[:_SLIM_SUMMARY_CHARS]).append(*slim)
