"""The customer-service window through the service: a player's message opens it, a reply outside it goes as the
template or is dead-lettered before any call (the loopback WhatsApp stand-in sees exactly what was sent), 131047
from the stand-in is handled the same way, and channels without a window are not held to one."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import REGISTRY

from tests.support.fake_whatsapp import FakeWhatsApp
from tests.support.store_kit import raw
from tests.worker.conftest import Harness, make_harness
from worker import ScriptedModel
from worker.channels.whatsapp import WhatsAppSender
from worker.channels.window import ServiceWindow, Template
from worker.envelopes.inputs import decode_dead_letter, decode_reply

CID = "447700900123"
DAY = 86_400.0
# Two sentences of 3,000 characters: a reply split into two parts.
LONG = ("A" * 2999 + ". ") + ("B" * 2999 + ".")


@pytest.fixture
def api() -> Iterator[FakeWhatsApp]:
    a = FakeWhatsApp().start()
    yield a
    a.stop()


def whatsapp(api: FakeWhatsApp, template: Template | None = None,
             clock: Callable[[], float] = time.time) -> Harness:
    sender = WhatsAppSender(phone_number_id="106540352242922", access_token="tok", base_url=api.base_url,
                            window=ServiceWindow(DAY, template), clock=clock)
    return make_harness(ScriptedModel(default=lambda req: "ack:" + req.messages[-1].content), channel=sender)


def age_last_message(h: Harness, seconds: float) -> None:
    """As if the player's last message had been accepted ``seconds`` ago."""
    raw(h.store).set(h.store.keys(CID).inbound, int((time.time() - seconds) * 1000))


def dead(h: Harness) -> list[tuple[str, str]]:
    return [(d.reason, d.detail) for d in map(decode_dead_letter, h.store.dead_letters(CID))]


def count(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_reply_inside_the_window_goes_as_text(api: FakeWhatsApp) -> None:
    h = whatsapp(api, Template("game_update"))
    h.client.send_message(CID, "where next?", message_id="wamid.in1", reply_to="wamid.in1")
    h.run()
    assert api.received == [{"messaging_product": "whatsapp", "recipient_type": "individual", "type": "text",
                             "to": CID, "text": {"preview_url": False, "body": "ack:where next?"},
                             "context": {"message_id": "wamid.in1"},
                             "biz_opaque_callback_data": f"{CID}|wamid.in1|0"}]  # names the part (statuses)


def test_a_reply_outside_the_window_goes_as_the_template(api: FakeWhatsApp) -> None:
    h = whatsapp(api, Template("game_update", "en_GB"))
    h.model.push(LONG)
    h.client.send_message(CID, "tell me everything", message_id="wamid.in1", reply_to="wamid.in1")
    age_last_message(h, DAY + 60)  # the reply waited (an outage) past the window
    before = count("parley_outside_window_total", outcome="template", why="window")
    h.run()
    # One template for the whole two-part reply, its parameter the reply's text cut to the limit.
    assert len(api.received) == 1
    assert api.received[0] == {
        "messaging_product": "whatsapp", "recipient_type": "individual", "to": CID, "type": "template",
        "template": {"name": "game_update", "language": {"code": "en_GB"}, "components": [
            {"type": "body", "parameters": [{"type": "text", "text": "A" * 1023 + "…"}]}]},
        "biz_opaque_callback_data": f"{CID}|wamid.in1|0"}
    assert h.store.outbox_depth(CID) == 0 and h.store.delivered(CID)[0][1] == ["wamid.out1"]
    assert count("parley_outside_window_total", outcome="template", why="window") == before + 1


def test_outside_the_window_without_a_template_the_reply_is_dead_lettered_before_any_call(api: FakeWhatsApp) -> None:
    h = whatsapp(api)
    h.model.push(LONG)
    h.client.send_message(CID, "tell me everything", message_id="wamid.in1")
    age_last_message(h, DAY + 1)
    h.run()
    assert api.received == [] and h.store.outbox_depth(CID) == 0
    [(reason, detail)] = dead(h)
    assert reason == "outside_window" and "no template" in detail
    letter = decode_dead_letter(h.store.dead_letters(CID)[0])
    assert decode_reply(letter.payload).parts[0].startswith("A")  # kept whole, for `parley replay`


def test_a_notice_to_a_player_who_never_wrote_is_outside_the_window(api: FakeWhatsApp) -> None:
    h = whatsapp(api)
    h.client.send_notice(CID, "The game starts in an hour.")  # a producer's own notice: no message opened it
    h.run()
    assert api.received == [] and [r for r, _ in dead(h)] == ["outside_window"]


def test_131047_from_the_api_gets_the_template(api: FakeWhatsApp) -> None:
    h = whatsapp(api, Template("game_update", parameter="fixed", text="Your guide answered; reply to read it."))
    api.fail(131047, message="Re-engagement message")
    before = count("parley_outside_window_total", outcome="template", why="131047")
    h.client.send_message(CID, "hi", message_id="wamid.in1")
    h.run()
    assert [b["type"] for b in api.received] == ["text", "template"]
    assert api.received[1]["template"]["components"][0]["parameters"][0]["text"] == (
        "Your guide answered; reply to read it.")
    assert dead(h) == [] and h.store.outbox_depth(CID) == 0
    assert count("parley_outside_window_total", outcome="template", why="131047") == before + 1


def test_131047_without_a_template_is_dead_lettered_as_outside_the_window(api: FakeWhatsApp) -> None:
    h = whatsapp(api)
    api.fail(131047, message="Re-engagement message")
    h.client.send_message(CID, "hi", message_id="wamid.in1")
    h.run()
    assert len(api.received) == 1
    [(reason, detail)] = dead(h)
    assert reason == "outside_window:131047" and "131047" in detail


def test_a_window_that_closes_mid_reply_sends_the_rest_as_one_template(api: FakeWhatsApp) -> None:
    clock = iter([time.time(), time.time() + DAY + 5])  # the window closes between the two parts
    h = whatsapp(api, Template("game_update"), clock=lambda: next(clock))
    h.model.push(LONG)
    h.client.send_message(CID, "tell me everything", message_id="wamid.in1")
    h.run()
    assert [b["type"] for b in api.received] == ["text", "template"]
    assert api.received[1]["template"]["components"][0]["parameters"][0]["text"].startswith("BBB")
    assert h.store.delivered(CID)[0][1] == ["wamid.out1", "wamid.out2"]


def test_channels_without_a_window_send_whatever_the_time() -> None:
    h = make_harness()  # a recording channel: console and webhook channels have no window
    h.client.send_notice(CID, "The game starts in an hour.")
    h.run()
    assert [text for _, text, _ in h.channel.sent] == ["The game starts in an hour."]


def test_the_window_is_read_with_the_claim_not_in_a_round_trip_of_its_own(api: FakeWhatsApp,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The claim that hands the deliverer a reply also reads when the player last wrote: the deliverer never asks
    the store for it separately."""
    h = whatsapp(api, Template("game_update"))
    reads: list[str] = []
    real = h.store.last_inbound
    monkeypatch.setattr(h.store, "last_inbound", lambda cid: reads.append(cid) or real(cid))
    for i in range(3):
        h.client.send_message(CID, f"question {i}", message_id=f"wamid.in{i}", reply_to=f"wamid.in{i}")
        h.run()
    assert [m["type"] for m in api.received] == ["text"] * 3 and reads == []
