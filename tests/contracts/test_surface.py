"""The public surface and the stored bytes, pinned: a move that drops a name, renames a keyword or changes what a
stored input decodes to fails here first. The pinned copies are written by ``python -m tests.contracts.surface``
and ``python -m tests.contracts.stored``; a change to the surface's copy is a decision made in review."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from tests.contracts.stored import INLET_JSON, stored
from tests.contracts.surface import surface
from worker.envelopes.inputs import decode_dead_letter, decode_envelope, decode_reply
from worker.inlet.messages import parse_message

HERE = pathlib.Path(__file__).parent
PINNED_SURFACE: dict[str, Any] = json.loads((HERE / "surface.json").read_text())
PINNED_STORED: dict[str, Any] = json.loads((HERE / "stored.json").read_text())
NOW = surface()


@pytest.mark.parametrize("name", sorted(PINNED_SURFACE["entries"]))
def test_every_pinned_entry_point_is_importable_with_its_signature(name: str) -> None:
    assert name in NOW["entries"], f"{name} is gone"
    assert NOW["entries"][name] == PINNED_SURFACE["entries"][name]


@pytest.mark.parametrize("part", ["cli", "tasks", "environment", "settings_keywords", "metrics"])
def test_commands_tasks_variables_and_metrics_are_as_pinned(part: str) -> None:
    assert NOW[part] == PINNED_SURFACE[part]


def test_nothing_new_is_public_without_being_pinned() -> None:
    assert set(NOW["entries"]) == set(PINNED_SURFACE["entries"])


@pytest.mark.parametrize("kind", sorted(PINNED_STORED["envelopes"]))
def test_an_envelope_stored_before_decodes_and_encodes_to_the_same_bytes(kind: str) -> None:
    data = bytes.fromhex(PINNED_STORED["envelopes"][kind])
    envelope = decode_envelope(data)
    assert envelope.conversation_id == "447700900123"
    assert envelope.to_bytes() == data  # a mailbox entry or a timer written before reads back unchanged


def test_a_dead_letter_and_a_reply_stored_before_decode() -> None:
    dead = decode_dead_letter(bytes.fromhex(PINNED_STORED["others"]["dead_letter"]))
    assert dead.reason == "max_attempts" and decode_envelope(dead.payload).message_id == "wamid.A1"
    reply = decode_reply(bytes.fromhex(PINNED_STORED["others"]["reply"]))
    assert reply.parts[0] == "By the church door." and len(reply.parts) == 2


@pytest.mark.parametrize("raw", INLET_JSON)
def test_the_inlets_json_still_parses(raw: str) -> None:
    message = parse_message(raw)
    assert message.conversation_id == "447700900123"


def test_the_pinned_bytes_are_what_the_code_writes_today() -> None:
    assert stored() == PINNED_STORED


def test_parts_an_older_worker_queued_still_decode_though_they_would_be_refused_now() -> None:
    """Checks added to the reply parts later (https links, trimmed ids, one-emoji reactions) refuse what is built
    now; a reply or an operator's input already stored by an older worker goes out as it was accepted."""
    import msgpack

    from worker.envelopes.reply_parts import parse_part
    from worker.errors import InvalidReplyPartError

    old_parts = [{"type": "image", "link": "http://example.org/a.png"},
                 {"type": "buttons", "text": "Go?", "buttons": [{"id": " y ", "title": "Yes"}]},
                 {"type": "reaction", "emoji": "lol"}]
    reply = msgpack.packb({"v": 1, "reply_id": "r-old", "conversation_id": "447700900123",
                           "recipient": "447700900123", "parts": old_parts, "created_at": 1.0})
    assert [p.type for p in decode_reply(reply).parts] == ["image", "buttons", "reaction"]  # type: ignore[union-attr]
    operator = msgpack.packb({"v": 1, "kind": "operator", "conversation_id": "447700900123", "message_id": "o-old",
                              "text": "hi", "parts": old_parts, "accepted_at": 1.0})
    assert len(decode_envelope(operator).parts or []) == 3
    for part in old_parts:
        with pytest.raises(InvalidReplyPartError):
            parse_part(part)
