"""Through the webhook ingress: an image whose media id is not one (``..``, a trailing newline, a path) is never
queued with that id; the player gets a clear outcome (the caption as their words, or the short answer), logged
and counted in the webhook's answer, and a good id is queued as it came."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.ingress.test_ingress import NOW, Rig, meta_bytes
from worker.envelopes.inputs import Media, decode_envelope

CID = "447700900123"


def image_body(wamid: str, image: dict[str, Any]) -> bytes:
    value = {"messaging_product": "whatsapp", "metadata": {"phone_number_id": "1"},
             "contacts": [{"wa_id": CID, "profile": {"name": "Sam"}}],
             "messages": [{"from": CID, "id": wamid, "timestamp": NOW, "type": "image", "image": image}]}
    return meta_bytes({"object": "whatsapp_business_account",
                       "entry": [{"id": "1", "changes": [{"field": "messages", "value": value}]}]})


@pytest.mark.parametrize("bad", ["..", "1\n", "../../me", "1?fields=x"])
def test_a_bad_media_id_is_never_queued_and_the_player_gets_a_clear_outcome(
        bad: str, caplog: pytest.LogCaptureFixture) -> None:
    rig = Rig()
    with caplog.at_level(logging.INFO):
        bare = rig.post(image_body("wamid.1", {"id": bad, "mime_type": "image/jpeg"})).json()
        captioned = rig.post(image_body("wamid.2", {"id": bad, "caption": "the stage door?"})).json()
    assert bare["notices"] == 1 and captioned["accepted"] == 1
    envs = [decode_envelope(p) for _, p in rig.store.inbox(CID)]
    assert [(e.kind, e.text, e.media) for e in envs] == [("notice", envs[0].text, None),
                                                        ("message", "the stage door?", None)]
    assert any("invalid media id" in r.getMessage() for r in caplog.records)


def test_a_good_media_id_is_queued_as_it_came() -> None:
    rig = Rig()
    rig.post(image_body("wamid.1", {"id": "1003383421387256", "mime_type": "image/jpeg", "caption": "Taj"}))
    [(_, payload)] = rig.store.inbox(CID)
    assert decode_envelope(payload).media == Media(id="1003383421387256", mime_type="image/jpeg")
