"""The WhatsApp sender against a loopback Cloud API, and error classification against real payloads."""

from __future__ import annotations

import io
from collections.abc import Iterator
from unittest.mock import patch

import pytest
from prometheus_client import REGISTRY

from tests.support.fake_whatsapp import FakeWhatsApp
from tests.support.whatsapp_fixtures import fixture_file, fixture_names
from worker.channels.channel import ConsoleChannel, ReadReceipts, WebhookChannel
from worker.channels.token import ACCEPTED_LOG, REJECTED_LOG, TokenHealth
from worker.channels.whatsapp import WhatsAppSender, classify_error, is_bsuid
from worker.errors import (
    DeliveryError,
    DeliveryPermanentError,
    DeliveryRetryableError,
    SendOutcomeUnknownError,
    WhatsAppTokenError,
)
from worker.testing import CreatedClients, RecordingChannel


@pytest.fixture
def api() -> Iterator[FakeWhatsApp]:
    a = FakeWhatsApp().start()
    yield a
    a.stop()


def sender(api: FakeWhatsApp, **kw: object) -> WhatsAppSender:
    return WhatsAppSender(phone_number_id="106540352242922", access_token="tok", base_url=api.base_url, **kw)  # type: ignore[arg-type]


def test_send_text_body_auth_and_wamid(api: FakeWhatsApp) -> None:
    s = sender(api)
    wamid = s.send_text("447700900123", "Hello from Parley", reply_to="wamid.in1")
    assert wamid == "wamid.out1"
    sent = api.sent[0]
    assert sent["path"] == "/v21.0/106540352242922/messages"
    assert sent["body"] == {"messaging_product": "whatsapp", "recipient_type": "individual", "type": "text",
                            "to": "447700900123", "text": {"preview_url": False, "body": "Hello from Parley"},
                            "context": {"message_id": "wamid.in1"}}
    assert api.headers[0]["authorization"] == "Bearer tok"


def test_callback_data_goes_out_as_biz_opaque_callback_data(api: FakeWhatsApp) -> None:
    """WhatsApp hands it back in the message's status webhooks: how the ingress knows which reply part a status is
    about (worker.envelopes.inputs.part_callback)."""
    s = sender(api)
    s.send_text("447700900123", "part one", callback_data="447700900123|wamid.in1|0")
    s.send_text("447700900123", "no data")
    assert api.sent[0]["body"]["biz_opaque_callback_data"] == "447700900123|wamid.in1|0"
    assert "biz_opaque_callback_data" not in api.sent[1]["body"]


def test_business_scoped_user_ids_go_in_recipient(api: FakeWhatsApp) -> None:
    assert is_bsuid("US.13491208655302741918") and not is_bsuid("447700900123") and not is_bsuid("+447700900123")
    sender(api).send_text("US.13491208655302741918", "hi")
    body = api.sent[0]["body"]
    assert body["recipient"] == "US.13491208655302741918" and "to" not in body


@pytest.mark.parametrize(("code", "status", "retryable"), [
    (130429, 400, True), (130429, 429, True), (131056, 400, True), (4, 429, True), (80007, 400, True),
    (131047, 400, False), (131026, 400, False), (100, 400, False), (131000, 500, True),
    (999999, 400, False), (999999, 503, True),
])
def test_errors_are_classified_by_code(api: FakeWhatsApp, code: int, status: int, retryable: bool) -> None:
    api.fail(code, status=status)
    with pytest.raises(DeliveryRetryableError if retryable else DeliveryPermanentError) as info:
        sender(api).send_text("447700900123", "x")
    assert info.value.code == code and info.value.status == status


@pytest.mark.parametrize(("status", "body"), [
    (401, {"error": {"message": "Error validating access token", "type": "OAuthException", "code": 190}}),
    (400, {"error": {"message": "Error validating access token", "type": "OAuthException", "code": 190,
                     "error_subcode": 463}}),
    (401, {"error": {"message": "Unauthorized"}}),  # a 401 without a code (a proxy, an older revision)
    (401, None),
])
def test_a_rejected_token_is_its_own_error_neither_retried_nor_permanent(status: int, body: object) -> None:
    err = classify_error(status, body, {})
    assert isinstance(err, WhatsAppTokenError)
    assert not isinstance(err, DeliveryRetryableError | DeliveryPermanentError)


def test_the_token_alarm_says_so_once_per_change_of_state(api: FakeWhatsApp, caplog: pytest.LogCaptureFixture) -> None:
    health = TokenHealth()
    s = sender(api, token=health)
    api.fail(190, status=401, times=5)
    gauge = "parley_whatsapp_token_rejected"
    with caplog.at_level("WARNING", logger="parley.delivery"):
        for n in range(1, 6):
            with pytest.raises(WhatsAppTokenError) as info:
                s.send_text("447700900123", "x")
            assert info.value.refusals == n and REGISTRY.get_sample_value(gauge, {"phone_number_id": ""}) == 1
        s.send_text("447700900123", "x")
        s.send_text("447700900123", "y")
    assert REGISTRY.get_sample_value(gauge, {"phone_number_id": ""}) == 0
    said = [r.getMessage() for r in caplog.records if r.name == "parley.delivery"]
    assert len(said) == 2 and said[0].startswith(REJECTED_LOG) and said[1].startswith(ACCEPTED_LOG)
    assert "5 refusals" in said[1]


def test_a_timeout_after_the_send_went_out_is_an_unknown_outcome(api: FakeWhatsApp) -> None:
    api.delay = 1.0
    with pytest.raises(SendOutcomeUnknownError):
        sender(api, timeout=0.2).send_text("447700900123", "x")


def test_a_200_without_a_message_id_is_an_unknown_outcome(api: FakeWhatsApp) -> None:
    api.fault = lambda body: (200, {"messaging_product": "whatsapp"}, {})
    with pytest.raises(SendOutcomeUnknownError):
        sender(api).send_text("447700900123", "x")


def test_a_connect_timeout_is_plainly_retryable() -> None:
    import httpx

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectTimeout("no route", request=request)

    s = WhatsAppSender(phone_number_id="1", access_token="t", base_url="http://127.0.0.1:9/v21.0",
                       transport=httpx.MockTransport(refuse))
    with pytest.raises(DeliveryRetryableError) as info:
        s.send_text("447700900123", "x")
    assert not isinstance(info.value, SendOutcomeUnknownError)


def test_timeouts_and_unreachable_are_retryable(api: FakeWhatsApp) -> None:
    api.delay = 1.0
    with pytest.raises(DeliveryRetryableError):
        sender(api, timeout=0.2).send_text("447700900123", "x")
    from tests.support.redis_server import free_port

    s = WhatsAppSender(phone_number_id="1", access_token="t", base_url=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(DeliveryRetryableError):
        s.send_text("447700900123", "x")


def test_pooled_client_is_reused(api: FakeWhatsApp) -> None:
    s = sender(api)
    created = CreatedClients(s._clients)
    for i in range(3):
        s.send_text("447700900123", f"m{i}")
    assert created.count == 1 and s._clients.idle() == 1 and len(api.sent) == 3


@pytest.mark.parametrize("name", fixture_names("send_*.json"))
def test_real_send_payloads(api: FakeWhatsApp, name: str) -> None:
    """The real sender against a loopback Cloud API answering each fixture's status and body: a success gives the
    fixture's wamid, an error the classified error of the fixture's code."""
    fx = fixture_file(name)
    status, payload = fx["http_status"], fx["payload"]
    api.fault = lambda body: (status, payload, {})
    s = sender(api)
    if name.startswith("send_success"):
        assert status == 200
        assert s.send_text("447700900123", "hello") == payload["messages"][0]["id"]
        assert len(api.received) == 1
        return
    code = name.removesuffix(".json").split("_")[2]
    retryable = code in ("130429", "131056", "4", "190")  # 190: retried until the token works, never dead-lettered
    expected: type[DeliveryError] = (WhatsAppTokenError if code == "190"  # held: neither retried nor dead-lettered
                                     else DeliveryRetryableError if retryable else DeliveryPermanentError)
    with pytest.raises(expected) as info:
        s.send_text("447700900123", "hello")
    assert info.value.retryable is retryable and str(info.value.code) == code and info.value.status == status
    # the same classification without HTTP, as the status webhooks' errors are classified
    err = classify_error(status, payload, {})
    if code == "190":  # a rejected token holds deliveries: neither a retry of the reply nor a dead letter
        assert isinstance(err, WhatsAppTokenError), (name, err)
    else:
        assert (err.retryable, err.code) == (retryable, info.value.code)
    assert str(err.code) == code


def test_console_and_webhook_channels(capsys: pytest.CaptureFixture[str]) -> None:
    assert ConsoleChannel().send_text("447700900123", "hello") == "console-1"
    assert "hello" in capsys.readouterr().out
    from tests.support.redis_server import free_port

    with pytest.raises(DeliveryRetryableError):
        WebhookChannel(f"http://127.0.0.1:{free_port()}/x").send_text("a", "b")


def _throttle(api: FakeWhatsApp, retry_after: str) -> None:
    api.errors.append((429, {"error": {"message": "(#130429) Rate limit hit", "code": 130429}},
                       {"Retry-After": retry_after}))


@pytest.mark.parametrize("value", ["soon", "1.5.2", "Tue, 99 Foo 2026 25:61:00 GMT", "nan", "inf", "-inf", "1e400",
                                   "  ", "Wed, 21 Oct 2015 07:28:00"])
def test_a_malformed_retry_after_gives_no_hint_instead_of_escaping_the_sender(api: FakeWhatsApp, value: str) -> None:
    _throttle(api, value)
    with pytest.raises(DeliveryRetryableError) as info:
        sender(api).send_text("447700900123", "x")
    assert info.value.code == 130429
    assert info.value.retry_after is None or 0.0 <= info.value.retry_after < 10.0  # a date in the past is "now"


@pytest.mark.parametrize(("value", "low", "high"), [("7", 7.0, 7.0), (" 2.5 ", 2.5, 2.5), ("-3", 0.0, 0.0)])
def test_retry_after_in_seconds(api: FakeWhatsApp, value: str, low: float, high: float) -> None:
    _throttle(api, value)
    with pytest.raises(DeliveryRetryableError) as info:
        sender(api).send_text("447700900123", "x")
    assert info.value.retry_after is not None and low <= info.value.retry_after <= high


def test_retry_after_as_an_http_date(api: FakeWhatsApp) -> None:
    import email.utils
    import time

    _throttle(api, email.utils.formatdate(time.time() + 60, usegmt=True))
    with pytest.raises(DeliveryRetryableError) as info:
        sender(api).send_text("447700900123", "x")
    assert info.value.retry_after is not None and 55.0 <= info.value.retry_after <= 61.0


# --- read receipts and the typing indicator ---------------------------------------------------------------------

def presence_count(outcome: str) -> float:
    return REGISTRY.get_sample_value("parley_presence_total", {"outcome": outcome}) or 0.0


def test_mark_read_with_typing_posts_the_cloud_api_body(api: FakeWhatsApp) -> None:
    before = presence_count("sent")
    s = sender(api)
    s.mark_read("wamid.in1", typing=True)
    s.mark_read("wamid.in2", typing=False)
    assert api.reads == [
        {"path": "/v21.0/106540352242922/messages",
         "body": {"messaging_product": "whatsapp", "status": "read", "message_id": "wamid.in1",
                  "typing_indicator": {"type": "text"}}},
        {"path": "/v21.0/106540352242922/messages",
         "body": {"messaging_product": "whatsapp", "status": "read", "message_id": "wamid.in2"}},
    ]
    assert api.sent == [] and presence_count("sent") == before + 2


@pytest.mark.parametrize(("code", "status"), [(130429, 400), (131047, 400), (100, 400), (131000, 500)])
def test_mark_read_swallows_api_errors_and_counts_them(api: FakeWhatsApp, code: int, status: int,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    before = presence_count("rejected")
    api.fail_reads(code, status=status)
    sender(api).mark_read("wamid.in1", typing=True)  # does not raise
    assert presence_count("rejected") == before + 1 and api.reads == []
    assert [r.levelname for r in caplog.records if r.name == "parley.delivery"] == ["WARNING"]


def test_a_receipt_refused_for_the_token_is_counted_and_raises_the_alarm_once(
        api: FakeWhatsApp, caplog: pytest.LogCaptureFixture) -> None:
    """Every turn sends a receipt: with the token rejected, a warning per receipt would bury the one line that
    matters. They are counted, and the token's alarm says it once."""
    before = presence_count("rejected")
    health = TokenHealth()
    s = sender(api, token=health)
    api.fail_reads(190, status=401, times=3)
    with caplog.at_level("WARNING", logger="parley.delivery"):
        for _ in range(3):
            s.mark_read("wamid.in1", typing=True)  # does not raise
        s.mark_read("wamid.in2", typing=False)
    assert presence_count("rejected") == before + 3 and health.rejected_since is None
    said = [r.getMessage() for r in caplog.records if r.name == "parley.delivery"]
    assert len(said) == 2 and said[0].startswith(REJECTED_LOG) and said[1].startswith(ACCEPTED_LOG)


def test_mark_read_swallows_timeouts_and_unreachable(api: FakeWhatsApp) -> None:
    from tests.support.redis_server import free_port

    timeouts, unreachable = presence_count("timeout"), presence_count("unreachable")
    with patch("worker.channels.whatsapp.RECEIPT_TIMEOUT", 0.2):
        api.delay = 1.0
        sender(api).mark_read("wamid.in1", typing=True)
    assert presence_count("timeout") == timeouts + 1
    WhatsAppSender(phone_number_id="1", access_token="t",
                   base_url=f"http://127.0.0.1:{free_port()}").mark_read("wamid.in1", typing=True)
    api.delay = 0.0
    api.read_fault = lambda body: None  # the connection drops
    sender(api).mark_read("wamid.in1", typing=True)
    assert presence_count("unreachable") == unreachable + 2


def test_a_failed_read_never_takes_an_error_meant_for_a_send(api: FakeWhatsApp) -> None:
    api.fail(131047)
    s = sender(api)
    s.mark_read("wamid.in1", typing=True)
    with pytest.raises(DeliveryPermanentError):
        s.send_text("447700900123", "x")
    assert len(api.reads) == 1


def test_other_channels_have_no_op_receipts() -> None:
    for channel in (ConsoleChannel(io.StringIO()), WebhookChannel("http://127.0.0.1:9/unused")):
        assert isinstance(channel, ReadReceipts)
        channel.mark_read("wamid.in1", typing=True)  # no output, no request
    recording = RecordingChannel()
    recording.mark_read("wamid.in1", typing=True)
    assert recording.read == [("wamid.in1", True)]
