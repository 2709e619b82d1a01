"""A readable view of a state blob, for ops and debugging."""

from __future__ import annotations

from typing import Any

from worker.conversation.history import exchanges
from worker.conversation.messages import Message
from worker.conversation.prompt import history_tokens
from worker.conversation.state import FORMAT_VERSION, decode_state
from worker.conversation.tokens import EstimateCounter
from worker.errors import StateDecodeError


def _view(m: Message, limit: int) -> dict[str, Any]:
    d: dict[str, Any] = {"seq": m.seq, "role": m.role}
    text = m.content if len(m.content) <= limit else m.content[:limit] + f"… (+{len(m.content) - limit} chars)"
    if text:
        d["content"] = text
    if m.tool_calls:
        d["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments[:limit]} for c in m.tool_calls]
    if m.tool_call_id:
        d["tool_call_id"] = m.tool_call_id
    if m.is_error:
        d["is_error"] = True
    if m.pinned:
        d["pinned"] = True
    if m.media is not None:
        d["media"] = {"kind": m.media.kind, "id": m.media.id, "mime_type": m.media.mime_type}
    return d


def inspect_state(state: bytes | None, *, max_chars: int = 500) -> dict[str, Any]:
    """Decode ``state`` into a plain dict (JSON-serialisable) without ever raising.

    An unusable blob gives ``{"ok": False, "problem": reason, "detail": ..., "bytes": n}``.
    """
    if not state:
        return {"ok": True, "empty": True, "bytes": 0}
    try:
        st = decode_state(state)
    except StateDecodeError as exc:
        return {"ok": False, "problem": exc.reason, "detail": exc.detail, "bytes": len(state)}
    counter = EstimateCounter()
    usage = st.last_usage
    return {
        "ok": True,
        "format": state[3] if len(state) > 3 else None,
        "current_format": FORMAT_VERSION,
        "compressed": bool(len(state) > 4 and state[4] & 1),
        "bytes": len(state),
        "provider": st.provider,
        "epoch": st.meta.epoch,
        "started_at": st.meta.started_at,
        "last_activity": st.meta.last_activity,
        "turns": st.meta.turns,
        "events": st.meta.events,
        "compactions": st.meta.compactions,
        "generation": st.generation,
        "messages": len(st.messages),
        "exchanges": len(exchanges(st.messages)),
        "estimated_tokens": history_tokens(st, counter),
        "last_usage": None if usage is None else {
            "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "cached_tokens": usage.cached_tokens, "cache_creation_tokens": usage.cache_creation_tokens,
        },
        "seen_seq": st.seen_seq,
        "next_seq": st.next_seq,
        "summary": st.summary,
        "summary_seq": st.summary_seq,
        "pinned": [_view(m, max_chars) for m in st.pinned],
        "history": [_view(m, max_chars) for m in st.messages],
    }
