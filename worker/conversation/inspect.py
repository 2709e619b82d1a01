"""A readable view of a state blob, for ops and debugging."""

from __future__ import annotations

from typing import Any

from worker.conversation.history import exchanges
from worker.conversation.messages import OPERATOR, Message
from worker.conversation.prompt import history_tokens
from worker.conversation.state import FORMAT_VERSION, ConversationState, appended_bytes, decode_state
from worker.conversation.tokens import EstimateCounter
from worker.errors import StateDecodeError


def _view(message: Message, limit: int) -> dict[str, Any]:
    view: dict[str, Any] = {"seq": message.seq, "role": message.role}
    content = message.content
    text = content if len(content) <= limit else content[:limit] + f"… (+{len(content) - limit} chars)"
    if text:
        view["content"] = text
    if message.tool_calls:
        view["tool_calls"] = [{"id": call.id, "name": call.name, "arguments": call.arguments[:limit]}
                              for call in message.tool_calls]
    if message.tool_call_id:
        view["tool_call_id"] = message.tool_call_id
    if message.name == OPERATOR and message.role == "assistant":
        view["by"] = OPERATOR  # a person wrote it, not the model
    if message.is_error:
        view["is_error"] = True
    if message.pinned:
        view["pinned"] = True
    if message.media is not None:
        view["media"] = {"kind": message.media.kind, "id": message.media.id, "mime_type": message.media.mime_type}
    if message.at is not None:
        view["at"] = message.at.isoformat()  # when it was said (none in a state written before times were kept)
    return view


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
        "appended_bytes": appended_bytes(state),  # what turns appended since the last whole write (a compaction)
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
        "facts": {f.key: f.text for f in st.facts},
        # The facts as of the last compaction (the system prompt shows these; changed ones follow the history).
        "preamble_facts": {f.key: f.text for f in st.preamble_facts},
        "history": [_view(m, max_chars) for m in st.messages],
    }


def reply_mark(state: ConversationState) -> str | None:
    """Where a turn's reply is in ``state`` (the state the turn wrote, its reply the last message): an opaque
    reference (``<epoch prefix>:<seq>``) that a trace entry keeps instead of repeating the turn's texts, which
    :func:`marked_texts` finds again while the history still holds them. ``None`` when the reply is not there (a
    reset phrase's answer)."""
    if not state.messages:
        return None
    last = state.messages[-1]
    if last.role != "assistant" or last.seq != state.last_seq:
        return None
    return f"{state.meta.epoch[:8]}:{last.seq}"


def marked_texts(state: bytes | None) -> dict[str, dict[str, str]]:
    """For each reply of ``state``'s history: its :func:`reply_mark` -> the texts a trace entry once repeated (the
    input's, under ``user`` or ``event``, and the ``reply``). An exchange compacted away, or a state of another epoch
    (a reset since), has none: the trace then shows only its counts. Never raises (an unusable blob has none)."""
    if not state:
        return {}
    try:
        st = decode_state(state)
    except StateDecodeError:
        return {}
    epoch = st.meta.epoch[:8]
    out: dict[str, dict[str, str]] = {}
    said: Message | None = None
    for m in st.messages:
        if m.role in ("user", "event"):
            said = m
        elif m.role == "assistant" and not m.tool_calls:
            texts = {"reply": m.content}
            if said is not None:
                texts[said.role] = said.content
            out[f"{epoch}:{m.seq}"] = texts
            said = None
    return out
