"""Hostile input at the worker: oversize texts, msgpack bombs, envelopes for the wrong conversation."""

from __future__ import annotations

import msgpack
import pytest

from tests.worker.conftest import make_harness
from worker.envelopes.inputs import Envelope, decode_dead_letter, decode_envelope
from worker.errors import EnvelopeError

CID = "447700900123"


@pytest.mark.parametrize("blob", [
    b"\x91" * 100_000 + b"\xc0",                      # deep nesting
    b"\xdd\xff\xff\xff\xff",                          # array32 declaring 4 billion items
    b"\xdb\x7f\xff\xff\xff" + b"a" * 10,              # str32 declaring 2 GB
    b"\xdf\x7f\xff\xff\xff",                          # map32 declaring 2 billion pairs
    msgpack.packb({"kind": "message", "conversation_id": CID, "text": "x", "v": 1, "zz": 1}),  # unknown field
    msgpack.packb({"kind": "message", "conversation_id": "a:b", "text": "x"}),
    msgpack.packb({"kind": "nuke", "conversation_id": CID}),
    msgpack.packb([1, 2, 3]),
    b"",
])
def test_envelope_bombs_and_junk_are_clear_errors(blob: bytes) -> None:
    with pytest.raises(EnvelopeError):
        decode_envelope(blob)


def test_oversize_text_that_reached_a_worker_is_dead_lettered_and_the_worker_goes_on() -> None:
    h = make_harness()
    big = Envelope(kind="message", conversation_id=CID, message_id="big", text="x" * 100_000)
    h.store.accept(CID, big.to_bytes(), "big")
    h.client.send_message(CID, "normal", message_id="m2")
    h.woken.append(("drain", CID))
    h.run()
    dead = [decode_dead_letter(d) for d in h.store.dead_letters(CID)]
    assert [(d.id, d.reason) for d in dead] == [("big", "invalid_input")]
    assert [t for _, t, _ in h.channel.sent] == ["ack:normal"]


def test_an_envelope_naming_another_conversation_is_not_applied_there() -> None:
    h = make_harness()
    other = Envelope(kind="event", conversation_id="victim", message_id="x1", text="you have been pwned")
    h.store.accept(CID, other.to_bytes(), "x1")  # pushed into CID's mailbox by a confused producer
    h.woken.append(("drain", CID))
    h.run()
    assert h.store.read_state("victim").blob is None
    assert decode_dead_letter(h.store.dead_letters(CID)[0]).reason == "malformed"


def test_dead_letter_replay_from_the_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from worker import cli
    from worker.errors import ModelRequestError

    h = make_harness()
    h.model.push(ModelRequestError("bad request"))
    h.client.send_message(CID, "please", message_id="m1")
    h.run()
    monkeypatch.setattr(cli, "_store", lambda: h.store)
    monkeypatch.setattr("worker.queue.wakeup.celery_waker", lambda settings, task="parley.drain": lambda cid: h.woken.append((task.split(".")[1], cid)))
    assert cli.main(["dead", CID]) == 0
    out = capsys.readouterr().out
    assert "m1" in out and "model_rejected" in out and "bad request" in out
    assert cli.main(["replay", CID, "0"]) == 0
    h.run()
    assert [t for _, t, _ in h.channel.sent] == ["ack:please"]
    assert h.store.dead_letters(CID) == []


def test_a_reply_record_from_a_newer_worker_is_delivered_not_dead_lettered() -> None:
    """Replies are written by workers only: one with a field this release does not know (a newer worker's, mid rolling
    upgrade) still decodes, so the reply reaches the player."""
    from worker.envelopes.inputs import decode_reply

    record = {"v": 1, "reply_id": "r1", "conversation_id": CID, "recipient": CID, "parts": ["hello"],
              "created_at": 1.0, "a_field_from_a_later_release": {"x": 1}}
    assert decode_reply(msgpack.packb(record)).parts == ["hello"]
