"""Inputs as they were stored before a change: envelope bytes of every kind (a mailbox entry and a held timer are
these bytes), a dead letter around one, a reply record, and the inlet's JSON messages.

``python -m tests.contracts.stored > tests/contracts/stored.json`` writes the pinned copy. Never regenerate it to
make a test pass: bytes already in a deployment's Redis do not change with the code.
"""

from __future__ import annotations

import json
from typing import Any

from worker.envelopes.inputs import DeadLetter, Media, ReplyRecord, Spent, build_envelope

AT = 1_790_000_000.25  # a fixed time, so the bytes are the same on every run


def _envelopes() -> dict[str, bytes]:
    common: dict[str, Any] = {"conversation_id": "447700900123", "accepted_at": AT}
    return {
        "message": build_envelope(kind="message", message_id="wamid.A1", text="where is the clue? 🗺️",
                                  reply_to="wamid.A0", recipient="447700900123", system="Be brief.",
                                  traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                                  **common).to_bytes(),
        "photo": build_envelope(kind="message", message_id="wamid.P1", text="", **common,
                                media=Media(id="m-1", mime_type="image/jpeg")).to_bytes(),
        "event": build_envelope(kind="event", message_id="ev-1", text="User tagged Harrogate Theatre", pinned=True,
                                key="target", respond=True, **common).to_bytes(),
        "player_event": build_envelope(kind="event", message_id="ev-2", text="📍 Harrogate", from_player=True,
                                       **common).to_bytes(),
        "reset": build_envelope(kind="reset", message_id="r-1", **common).to_bytes(),
        "splice": build_envelope(kind="splice", message_id="s-1", state=b"\x01state", **common,
                                 spent=Spent(prompt=10, completion=3, model="gpt-4o-mini")).to_bytes(),
        "notice": build_envelope(kind="notice", message_id="n-1", text="I can't read that yet.", **common).to_bytes(),
        "operator": build_envelope(kind="operator", message_id="o-1", text="Hi, Sam here.",
                                   parts=["and one more thing", {"type": "location", "latitude": 53.99,
                                                                 "longitude": -1.54, "name": "Theatre"}],
                                   **common).to_bytes(),
    }


def _others(envelopes: dict[str, bytes]) -> dict[str, bytes]:
    return {
        "dead_letter": DeadLetter(what="input", id="wamid.A1", reason="max_attempts", detail="crashed 3 times",
                                  payload=envelopes["message"], attempts=3, at=AT).to_bytes(),
        "reply": ReplyRecord(reply_id="rep-1", conversation_id="447700900123", recipient="447700900123",
                             parts=["By the church door.", {"type": "buttons", "text": "Go?", "buttons": [
                                 {"id": "y", "title": "Yes"}]}], reply_to="wamid.A1", created_at=AT).to_bytes(),
    }


INLET_JSON = [
    '{"kind": "message", "conversation_id": "447700900123", "text": "hi", "message_id": "q-1"}',
    '{"kind": "event", "conversation_id": "447700900123", "text": "tagged", "pinned": true, "key": "k",'
    ' "respond": true, "at": "2026-12-01T10:00:00+00:00"}',
    '{"kind": "reset", "conversation_id": "447700900123", "message_id": "q-3"}',
]


def stored() -> dict[str, Any]:
    envelopes = _envelopes()
    return {"envelopes": {k: v.hex() for k, v in envelopes.items()},
            "others": {k: v.hex() for k, v in _others(envelopes).items()},
            "inlet": INLET_JSON}


if __name__ == "__main__":
    print(json.dumps(stored(), indent=1, sort_keys=True))
