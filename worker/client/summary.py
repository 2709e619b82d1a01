"""What ``parley show`` prints of a conversation, and the HTTP API's ``GET /v1/conversations/{id}`` answers."""

from __future__ import annotations

from typing import Any

import msgpack

from worker.conversation.inspect import inspect_state, marked_texts
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


GONE = "no longer in the state (compacted away, or the conversation was reset)"
#: What a turn's trace entry leaves out when it is so (a turn's entry is the one with
#: ``prompt_tokens``): the readers put it back, so an entry reads as it did.
TURN_USUAL: dict[str, Any] = {"finish": "stop", "model_calls": 1, "tool_calls": 0, "replayed": [0, 0],
                              "cached_tokens": 0, "cache_write_tokens": 0, "reset": None, "parts": 1}


def with_texts(entries: list[Any], state: bytes | None) -> list[Any]:
    """Trace entries whole, as a reader wants them: a turn's with the fields at their usual value put back
    (:data:`TURN_USUAL`) and its texts from ``state`` (the entry references them, ``in_state``, rather than
    repeating them; see :func:`worker.conversation.inspect.marked_texts`): ``user`` or ``event`` and ``reply``, or
    ``texts`` saying they are gone."""
    marks = marked_texts(state) if any(isinstance(e, dict) and "in_state" in e for e in entries) else {}
    out = []
    for e in entries:
        if isinstance(e, dict) and "prompt_tokens" in e:
            e = {**TURN_USUAL, **e}
        if isinstance(e, dict) and "in_state" in e:
            found = marks.get(str(e["in_state"]))
            e = {**e, **found} if found is not None else {**e, "texts": GONE}
        out.append(e)
    return out


def summary(store: ConversationStore, cid: str) -> dict[str, Any]:
    """The decoded state, mailbox and outbox depth, the last replies and the latest delivery status of each recent
    message."""
    snap = store.read_state(cid)
    trace = with_texts([msgpack.unpackb(t, raw=False) for t in store.trace(cid, 50)], snap.blob)
    statuses = store.statuses(cid, 50)
    latest = {s.provider_id: s.status for s in statuses}
    pause = store.paused(cid)
    opt_outs = store.opt_outs(cid)
    archived, archive_bytes = store.archive_size(cid)
    return {"conversation_id": cid, "version": snap.version,
            # The player opted out (an opt-out phrase, `parley optout`): nothing business-initiated reaches them.
            "opted_out": "stop" in opt_outs, "marketing_opted_out": "marketing" in opt_outs,
            # A person has taken it over (no model call, no reply): until when, None for "until resumed".
            "paused": pause is not None, "paused_until": pause.until if pause is not None else None,
            "mailbox_depth": store.inbox_depth(cid),
            "scheduled": store.scheduled_count(cid),  # inputs held until due (at=): `parley scheduled` lists them
            "outbox_depth": store.outbox_depth(cid),
            "dead_letters": len(store.dead_letters(cid)),
            "quarantined_states": len(store.quarantined(cid)),
            "tokens_today": store.tokens_today(cid),  # what PARLEY_DAILY_TOKEN_BUDGET is checked against
            # What left the verbatim history and the model can still search (recall): messages (None: unreadable)
            # and the batches' bytes, which PARLEY_RECALL_MAX_BYTES bounds.
            "archive": {"messages": archived, "bytes": archive_bytes},
            "last_replies": [{"id": t.get("id"), "reply": t.get("reply"), "prompt_tokens": t.get("prompt_tokens")}
                             for t in trace if t.get("reply")][-5:],
            "delivered": [{"id": rid, "provider_ids": ids, "statuses": [latest.get(i) for i in ids]}
                          for rid, ids in store.delivered(cid)][-5:],
            # The latest status of each recent message (forward only: a late `delivered` never hides a `read`).
            "statuses": [{"provider_id": s.provider_id, "status": s.status, "at_ms": s.at_ms,
                          **({"detail": s.detail} if s.detail else {})} for s in statuses[-10:]],
            "state": inspect_state(snap.blob)}


def known(view: dict[str, Any]) -> bool:
    """Whether a summary shows anything of the conversation (a state, an input, a held one, a reply, a dead letter):
    the API answers 404 otherwise."""
    return bool(view["version"] or view["paused"] or view["mailbox_depth"] or view["outbox_depth"] or view["dead_letters"]
                or view["quarantined_states"] or view["last_replies"] or view["statuses"] or view["scheduled"]
                or view["opted_out"] or view["marketing_opted_out"])  # an opt-out outlives a delete
