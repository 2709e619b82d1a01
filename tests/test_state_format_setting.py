"""``PARLEY_STATE_FORMAT``: the worker writes format 5 (what the release before reads) until told 6; it reads both.
And the envelope's ``sent_at`` (WhatsApp's time of a player's message): only a player's input carries it, and an
envelope without it is the bytes it always was."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from worker import ScriptedModel
from worker.conversation.state import decode_state
from worker.envelopes.inputs import build_envelope, decode_envelope
from worker.errors import EnvelopeError
from worker.runtime import build_chat
from worker.settings import Settings

CID = "447700900123"


def test_the_worker_writes_format_5_until_told_6(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PARLEY_STATE_FORMAT", raising=False)
    old = build_chat(Settings(_env_file=None), ScriptedModel())
    assert old.state_format == 5
    blob5 = old.chat_with_state(None, user="hi")[1]
    assert blob5[3] == 5 and all(m.at is None for m in decode_state(blob5).messages)
    monkeypatch.setenv("PARLEY_STATE_FORMAT", "6")
    new = build_chat(Settings(_env_file=None), ScriptedModel())
    assert new.state_format == 6
    blob6 = new.chat_with_state(blob5, user="again")[1]  # the format-5 state moves whole, once
    assert blob6[3] == 6 and [m.at is None for m in decode_state(blob6).messages] == [True, True, False, False]
    assert old.chat_with_state(blob6, user="back")[1][3] == 5  # and a worker told 5 reads it, writing 5
    monkeypatch.setenv("PARLEY_STATE_FORMAT", "7")
    with pytest.raises(ValidationError):
        Settings(_env_file=None)


def test_only_a_players_input_carries_the_time_it_was_sent() -> None:
    message = build_envelope(kind="message", conversation_id=CID, text="hi", sent_at=1_800_000_000)
    assert decode_envelope(message.to_bytes()).sent_at == 1_800_000_000
    pin = build_envelope(kind="event", conversation_id=CID, text="📍 Harrogate", from_player=True, sent_at=5)
    assert decode_envelope(pin.to_bytes()).sent_at == 5
    for kind, extra in (("event", {}), ("notice", {}), ("operator", {})):
        with pytest.raises(EnvelopeError, match="carries the time it was sent"):
            build_envelope(kind=kind, conversation_id=CID, text="x", sent_at=5, **extra)
    with pytest.raises(EnvelopeError):
        build_envelope(kind="message", conversation_id=CID, text="hi", sent_at=-1)


def test_an_envelope_without_the_time_is_the_bytes_it_was() -> None:
    plain = build_envelope(kind="message", conversation_id=CID, text="hi", message_id="m", accepted_at=1.0)
    assert b"sent_at" not in plain.to_bytes()
    assert b"sent_at" in plain.model_copy(update={"sent_at": 7}).to_bytes()
