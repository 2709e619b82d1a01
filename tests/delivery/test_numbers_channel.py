"""Several business numbers in the sender: each number's sends go to ``{base}/{phone_number_id}/messages`` with that
number's token, to the player's own id; a rejected token holds only its number; a recipient naming a number no
longer configured is refused for good, never sent from another number."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY

from tests.support.fake_whatsapp import FakeWhatsApp
from worker.channels.by_number import NumbersChannel
from worker.channels.token import TOKEN, TokenHealth, for_number
from worker.channels.whatsapp import WhatsAppSender
from worker.errors import DeliveryPermanentError, WhatsAppTokenError
from worker.settings.business_numbers import Number, Numbers

MAIN, QUIZ = "106540352242922", "106540352242923"
PLAYER = "16505551234"
NUMBERS = Numbers(Number(MAIN, "token-main"), (Number(QUIZ, "token-quiz"),))


@pytest.fixture
def wa() -> Iterator[FakeWhatsApp]:
    fake = FakeWhatsApp().start()
    yield fake
    fake.stop()


def channel(wa: FakeWhatsApp) -> NumbersChannel:
    return NumbersChannel(NUMBERS, lambda n, token: WhatsAppSender(
        base_url=wa.base_url, phone_number_id=n.phone_number_id, access_token=n.access_token, token=token))


def test_each_numbers_sends_go_to_its_url_with_its_token(wa: FakeWhatsApp) -> None:
    ch = channel(wa)
    ch.send_text(PLAYER, "from main")
    ch.send_text(f"{QUIZ}.{PLAYER}", "from quiz")
    ch.send_reply(f"{QUIZ}.US.13491208655302741918", ["to a username"], reply_to=None, last_inbound=time.time())
    assert [(s["path"], h["authorization"]) for s, h in zip(wa.sent, wa.headers, strict=True)] == [
        (f"/v21.0/{MAIN}/messages", "Bearer token-main"),
        (f"/v21.0/{QUIZ}/messages", "Bearer token-quiz"),
        (f"/v21.0/{QUIZ}/messages", "Bearer token-quiz"),
    ]
    # The player's own id is addressed, never the prefixed conversation id.
    assert [s["body"].get("to") or s["body"].get("recipient") for s in wa.sent] == [
        PLAYER, PLAYER, "US.13491208655302741918"]
    ch.close()


def test_read_receipts_go_through_the_number_the_player_wrote_to(wa: FakeWhatsApp) -> None:
    ch = channel(wa)
    ch.mark_read_for(f"{QUIZ}.{PLAYER}", "wamid.in1", typing=True)
    ch.mark_read_for(PLAYER, "wamid.in2", typing=False)
    assert [r["path"] for r in wa.reads] == [f"/v21.0/{QUIZ}/messages", f"/v21.0/{MAIN}/messages"]


def test_a_rejected_token_holds_only_its_number(wa: FakeWhatsApp) -> None:
    ch = channel(wa)
    quiz_health = ch.senders[QUIZ].token
    main_health = ch.senders[MAIN].token
    assert main_health is for_number(MAIN) and quiz_health is for_number(QUIZ)  # shared with the photo fetchers
    assert isinstance(quiz_health, TokenHealth) and quiz_health is not main_health and TOKEN not in (
        main_health, quiz_health)
    ch.send_text(PLAYER, "before")  # accepted: whatever an earlier test of this process did to the number's state
    wa.fail(190, status=401, message="Error validating access token: Session has expired")
    with pytest.raises(WhatsAppTokenError):
        ch.send_text(f"{QUIZ}.{PLAYER}", "held")
    assert quiz_health.rejected_since is not None and main_health.rejected_since is None
    gauge = "parley_whatsapp_token_rejected"  # one series per number: the alert names the token to fix
    assert REGISTRY.get_sample_value(gauge, {"phone_number_id": QUIZ}) == 1
    assert REGISTRY.get_sample_value(gauge, {"phone_number_id": MAIN}) == 0
    assert ch.send_text(PLAYER, "goes on")  # the other number is not held
    assert ch.send_text(f"{QUIZ}.{PLAYER}", "fixed")
    assert [s["body"]["text"]["body"] for s in wa.sent] == ["before", "goes on", "fixed"]
    assert REGISTRY.get_sample_value(gauge, {"phone_number_id": QUIZ}) == 0


def test_a_number_no_longer_configured_is_refused_for_good(wa: FakeWhatsApp) -> None:
    ch = channel(wa)
    with pytest.raises(DeliveryPermanentError, match="business number 555000 is not configured"):
        ch.send_text(f"555000.{PLAYER}", "lost")
    assert wa.received == []


def test_a_rich_part_goes_from_the_number_the_player_wrote_to(wa: FakeWhatsApp) -> None:
    from worker.envelopes.reply_parts import out_part

    ch = channel(wa)
    pin = out_part({"type": "location", "latitude": 53.9921, "longitude": -1.5418, "name": "Harrogate Theatre"})
    ch.send_reply(f"{QUIZ}.{PLAYER}", [pin, "see you there"], reply_to=None, last_inbound=time.time())
    assert [(s["path"], h["authorization"], s["body"]["type"]) for s, h in zip(wa.sent, wa.headers, strict=True)] == [
        (f"/v21.0/{QUIZ}/messages", "Bearer token-quiz", "location")]
    assert wa.sent[0]["body"]["to"] == PLAYER
    ch.close()
