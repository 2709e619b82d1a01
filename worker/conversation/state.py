"""The conversation state and its codec.

Outside this package the state is opaque ``bytes``. Inside, it is :class:`ConversationState`: the history,
the rolling summary, pinned items, what the model has already seen, the last provider-reported usage and
the conversation's metadata. This module is the state's one face: what it holds (:mod:`.state_model`), its wire
format (:mod:`.state_format`), writing it (:mod:`.state_encode`), reading it (:mod:`.state_decode`), and
:func:`load_state`, which never raises.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.conversation.history import CleanPrefix
from worker.conversation.state_decode import MIGRATIONS, appended_bytes, decode_state, decode_with_memo
from worker.conversation.state_encode import Memo, encode_state, encode_with_memo
from worker.conversation.state_format import (
    COMPRESS_OVER,
    DEFAULT_MAX_STATE_BYTES,
    FLAG_ZSTD,
    FOLD_AT,
    FORMAT_VERSION,
    MAGIC,
)
from worker.conversation.state_model import ConversationState, Fact, Meta
from worker.conversation.tokens import CountedPrefix
from worker.errors import StateDecodeError

__all__ = [
    "COMPRESS_OVER", "DEFAULT_MAX_STATE_BYTES", "FLAG_ZSTD", "FOLD_AT", "FORMAT_VERSION", "MAGIC", "MIGRATIONS",
    "ConversationState", "Fact", "LoadResult", "Memo", "Meta", "appended_bytes", "decode_state", "decode_with_memo",
    "encode_state", "encode_with_memo", "load_state",
]


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What :func:`load_state` found: the state to continue with and, when the blob was unusable, why."""

    state: ConversationState
    problem: StateDecodeError | None = None
    memo: Memo | None = None  # what the stored blob holds (a write appending to it needs it)
    clean: CleanPrefix | None = None  # the resident's, when it came from one
    counted: CountedPrefix | None = None  # the resident's too: its history's last token count


def load_state(
    blob: bytes | None, *, provider: str, max_bytes: int = DEFAULT_MAX_STATE_BYTES, now: float | None = None
) -> LoadResult:
    """Decode ``blob`` for ``provider``; never raises. ``None`` or empty bytes start a fresh conversation;
    an unusable blob also starts one, and ``problem`` says why (for quarantine and metrics)."""
    if not blob:
        return LoadResult(ConversationState.fresh(provider, now=now))
    try:
        memo = decode_with_memo(blob, provider=provider, max_bytes=max_bytes)
    except StateDecodeError as exc:
        return LoadResult(ConversationState.fresh(provider, now=now), exc)
    return LoadResult(memo.state, memo=memo)
