"""What ``parley show`` prints of a conversation, and the HTTP API's ``GET /v1/conversations/{id}`` answers."""

from __future__ import annotations

from typing import Any

import msgpack

from worker.conversation.inspect import inspect_state
from worker.store.redis_store import ConversationStore


def plain(o: Any) -> Any:
    """A JSON-able stand-in for what a trace entry may hold: msgpack bytes decoded, other bytes as hex, the rest
    as text (``json.dumps(..., default=plain)``)."""
    if isinstance(o, bytes):
        try:
            return msgpack.unpackb(o, raw=False)
        except Exception:
            return o.hex()
    return str(o)


def summary(store: ConversationStore, cid: str) -> dict[str, Any]:
    """The decoded state, mailbox and outbox depth, the last replies and the latest delivery status of each recent
    message."""
    snap = store.read_state(cid)
    trace = [msgpack.unpackb(t, raw=False) for t in store.trace(cid, 50)]
    statuses = store.statuses(cid, 50)
    latest = {s.provider_id: s.status for s in statuses}
    pause = store.paused(cid)
    return {"conversation_id": cid, "version": snap.version,
            # A person has taken it over (no model call, no reply): until when, None for "until resumed".
            "paused": pause is not None, "paused_until": pause.until if pause is not None else None,
            "mailbox_depth": store.inbox_depth(cid),
            "outbox_depth": store.outbox_depth(cid),
            "dead_letters": len(store.dead_letters(cid)),
            "quarantined_states": len(store.quarantined(cid)),
            "tokens_today": store.tokens_today(cid),  # what PARLEY_DAILY_TOKEN_BUDGET is checked against
            "last_replies": [{"id": t.get("id"), "reply": t.get("reply"), "prompt_tokens": t.get("prompt_tokens")}
                             for t in trace if t.get("reply")][-5:],
            "delivered": [{"id": rid, "provider_ids": ids, "statuses": [latest.get(i) for i in ids]}
                          for rid, ids in store.delivered(cid)][-5:],
            # The latest status of each recent message (forward only: a late `delivered` never hides a `read`).
            "statuses": [{"provider_id": s.provider_id, "status": s.status, "at_ms": s.at_ms,
                          **({"detail": s.detail} if s.detail else {})} for s in statuses[-10:]],
            "state": inspect_state(snap.blob)}


def known(view: dict[str, Any]) -> bool:
    """Whether a summary shows anything of the conversation (a state, an input, a reply, a dead letter): the API
    answers 404 otherwise."""
    return bool(view["version"] or view["paused"] or view["mailbox_depth"] or view["outbox_depth"] or view["dead_letters"]
                or view["quarantined_states"] or view["last_replies"] or view["statuses"])
