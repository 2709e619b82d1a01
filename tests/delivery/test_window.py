"""The customer-service window and the template, in the WhatsApp sender alone (the deliverer's side is in
tests/worker/test_service_window.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fake_whatsapp import FakeWhatsApp
from worker.channels.channel import ConsoleChannel, WebhookChannel, WindowedChannel
from worker.channels.whatsapp import WhatsAppSender
from worker.channels.window import MAX_PARAMETER_CHARS, ServiceWindow, Template, template_parameter
from worker.errors import DeliveryPermanentError, OutsideWindowError
from worker.testing import RecordingChannel

NOW = 1_800_000_000.0
HOUR = 3600.0
TO = "447700900123"


@pytest.fixture
def api() -> Iterator[FakeWhatsApp]:
    a = FakeWhatsApp().start()
    yield a
    a.stop()


def sender(api: FakeWhatsApp, template: Template | None = None, hours: float = 24,
           pacer: Paces | None = None) -> WhatsAppSender:
    return WhatsAppSender(phone_number_id="106540352242922", access_token="tok", base_url=api.base_url,
                          window=ServiceWindow(hours * HOUR, template), clock=lambda: NOW, pacer=pacer)


class Paces:
    """A pace that lets every send go at once and writes down whom each was to."""

    def __init__(self) -> None:
        self.admitted: list[str] = []

    def admit(self, recipient: str) -> float:
        self.admitted.append(recipient)
        return 0.0


def test_only_whatsapp_has_a_window() -> None:
    assert isinstance(WhatsAppSender(phone_number_id="1", access_token="t"), WindowedChannel)
    for channel in (ConsoleChannel(), RecordingChannel(), WebhookChannel("http://127.0.0.1:9/x")):
        assert not isinstance(channel, WindowedChannel)


@pytest.mark.parametrize(("last", "open_"), [(NOW - 1, True), (NOW - 24 * HOUR + 1, True), (NOW - 24 * HOUR, False),
                                             (NOW - 30 * HOUR, False), (None, False)])
def test_the_window_is_24_hours_from_the_last_message(last: float | None, open_: bool) -> None:
    assert ServiceWindow().is_open(last, NOW) is open_
    assert ServiceWindow(seconds=0).is_open(last, NOW)  # 0: not checked before a send


def test_inside_the_window_the_part_goes_as_text(api: FakeWhatsApp) -> None:
    sent = sender(api).send_reply(TO, ["one", "two"], reply_to="wamid.in", last_inbound=NOW - HOUR)
    assert sent.message_id == "wamid.out1" and not sent.rest
    assert api.sent[0]["body"]["type"] == "text" and api.sent[0]["body"]["text"]["body"] == "one"


def test_outside_the_window_the_rest_goes_as_one_template(api: FakeWhatsApp) -> None:
    paces = Paces()
    s = sender(api, Template("game_update", "en_GB"), pacer=paces)
    sent = s.send_reply(TO, ["Part one.\nWith a line.", "Part two."], reply_to="wamid.in",
                        last_inbound=NOW - 25 * HOUR)
    assert sent.rest and sent.message_id == "wamid.out1" and paces.admitted == [TO]
    assert api.received == [{
        "messaging_product": "whatsapp", "recipient_type": "individual", "to": TO, "type": "template",
        "template": {"name": "game_update", "language": {"code": "en_GB"},
                     "components": [{"type": "body",
                                     "parameters": [{"type": "text", "text": "Part one. With a line. Part two."}]}]},
    }]


def test_outside_the_window_without_a_template_nothing_is_called(api: FakeWhatsApp) -> None:
    paces = Paces()
    with pytest.raises(OutsideWindowError) as info:
        sender(api, pacer=paces).send_reply(TO, ["hi"], reply_to=None, last_inbound=None)
    assert info.value.code is None and api.received == [] and paces.admitted == []


def test_131047_is_answered_with_the_template_once(api: FakeWhatsApp) -> None:
    api.fail(131047, message="Re-engagement message")
    paces = Paces()
    sent = sender(api, Template("game_update"), pacer=paces).send_reply(TO, ["hi"], reply_to=None,
                                                                        last_inbound=NOW - HOUR)
    assert sent.rest and [b["type"] for b in api.received] == ["text", "template"]
    assert paces.admitted == [TO, TO]  # each call keeps the pace


def test_131047_without_a_template_is_outside_the_window(api: FakeWhatsApp) -> None:
    api.fail(131047, message="Re-engagement message")
    with pytest.raises(OutsideWindowError) as info:
        sender(api).send_reply(TO, ["hi"], reply_to=None, last_inbound=NOW - HOUR)
    assert info.value.code == 131047 and len(api.received) == 1


def test_a_failing_template_is_not_tried_again(api: FakeWhatsApp) -> None:
    api.fail(131047, message="Re-engagement message")
    api.fail(132001, message="Template name does not exist in the translation")
    with pytest.raises(DeliveryPermanentError) as info:
        sender(api, Template("gone")).send_reply(TO, ["hi"], reply_to=None, last_inbound=NOW - HOUR)
    assert info.value.code == 132001 and not isinstance(info.value, OutsideWindowError)
    assert [b["type"] for b in api.received] == ["text", "template"]


def test_business_scoped_ids_get_the_template_in_recipient(api: FakeWhatsApp) -> None:
    sender(api, Template("t")).send_reply("US.13491208655302741918", ["hi"], reply_to=None, last_inbound=None)
    body = api.received[0]
    assert body["recipient"] == "US.13491208655302741918" and "to" not in body


# --- the template's parameter ----------------------------------------------------------------------------

def test_the_parameter_is_one_line_within_the_limit() -> None:
    assert template_parameter("a\n\nb\tc     d ") == "a b c d"  # Meta refuses newlines, tabs and 5 spaces
    long = template_parameter("word " * 1000)
    assert len(long) == MAX_PARAMETER_CHARS and long.endswith("…")
    exact = "x" * MAX_PARAMETER_CHARS
    assert template_parameter(exact) == exact


def test_the_parameter_comes_from_the_reply_a_fixed_text_or_nothing() -> None:
    def param(t: Template) -> object:
        return t.payload("the reply")

    assert param(Template("t")) == {"name": "t", "language": {"code": "en_US"}, "components": [
        {"type": "body", "parameters": [{"type": "text", "text": "the reply"}]}]}
    fixed = param(Template("t", parameter="fixed", text="You have a new answer waiting."))
    assert fixed["components"][0]["parameters"][0]["text"] == "You have a new answer waiting."  # type: ignore[index]
    assert param(Template("t", "fr", parameter="none")) == {"name": "t", "language": {"code": "fr"}}
    with pytest.raises(ValueError, match="fixed"):
        Template("t", parameter="fixed")
