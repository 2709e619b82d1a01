"""The loopback WhatsApp stand-in's throughput limits, which the pacing tests rely on to see an overload."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fake_whatsapp import FakeWhatsApp
from worker.channels.whatsapp import WhatsAppSender
from worker.errors import DeliveryRetryableError


@pytest.fixture
def api() -> Iterator[FakeWhatsApp]:
    a = FakeWhatsApp().start()
    yield a
    a.stop()


def codes(api: FakeWhatsApp, recipients: list[str]) -> list[int | None]:
    sender = WhatsAppSender(phone_number_id="106540352242922", access_token="tok", base_url=api.base_url)
    out: list[int | None] = []
    for to in recipients:
        try:
            sender.send_text(to, "hi")
            out.append(None)
        except DeliveryRetryableError as exc:
            out.append(exc.code)
    return out


def test_sends_over_the_numbers_rate_get_130429(api: FakeWhatsApp) -> None:
    api.limit(per_second=5, allowance=2, window=10)
    got = codes(api, [f"4477009001{i:02d}" for i in range(60)])
    assert got[:52] == [None] * 52 and set(got[52:]) == {130429}  # 5/s x 10 s + 2, all within the window
    assert len(api.sent) == 52 and api.busiest(10) == 52


def test_sends_over_the_pair_rate_get_131056(api: FakeWhatsApp) -> None:
    api.limit(per_second=1000, allowance=0, pair_per_second=1, pair_allowance=1, window=10)
    got = codes(api, ["447700900100"] * 12 + ["447700900101"])
    assert got == [None] * 11 + [131056, None]
    assert api.throttled == [(131056, "447700900100")]
