"""The pace a channel keeps, through the deliverer: short waits are slept through, long ones become a later delivery
that holds no worker (and counts no failure, leaves no part in flight), and the parts of a reply keep their order."""

from __future__ import annotations

import time

import pytest
from prometheus_client import REGISTRY

from tests.support.store_kit import raw
from tests.worker.conftest import Harness, make_harness
from worker import ScriptedModel
from worker.channels.pacing import Pacer
from worker.errors import RetryLater
from worker.store.limits import PaceLimits
from worker.testing import RecordingChannel

CID = "447700900123"
SENDER = "106540352242922"
THREE_PARTS = " ".join(c * 3999 + "." for c in "ABC")


class Sleeps:
    """Real sleeps (Redis's clock must move), written down."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.slept.append(seconds)
        time.sleep(seconds)


class PacedChannel(RecordingChannel):
    """A recording channel that keeps its pace before each send, as the WhatsApp sender does."""

    pacer: Pacer | None = None

    def send_text(self, recipient: str, text: str, *, reply_to: str | None = None,
                  callback_data: str | None = None) -> str:
        if self.pacer is not None:
            self.pacer.admit(recipient)
        return super().send_text(recipient, text, reply_to=reply_to, callback_data=callback_data)


def paced(limits: PaceLimits, max_sleep: float = 2.0) -> tuple[Harness, Sleeps]:
    channel = PacedChannel()
    h = make_harness(ScriptedModel(default=lambda req: "ack:" + req.messages[-1].content), channel=channel)
    sleeps = Sleeps()
    channel.pacer = Pacer(h.store, SENDER, limits, max_sleep=max_sleep, sleep=sleeps)
    return h, sleeps


def waits(limit: str, how: str) -> float:
    return REGISTRY.get_sample_value("parley_pace_waits_total", {"limit": limit, "how": how}) or 0.0


def test_sends_within_the_pace_go_at_once() -> None:
    h, sleeps = paced(PaceLimits(per_second=80, burst=10, recipient_per_second=1, recipient_burst=5))
    for i in range(3):
        h.client.send_message(CID, f"m{i}", message_id=f"wamid.{i}")
    h.run()
    assert len(h.channel.sent) == 3 and sleeps.slept == []


def test_a_short_wait_is_slept_through_and_parts_keep_their_order() -> None:
    h, sleeps = paced(PaceLimits(per_second=0, recipient_per_second=10, recipient_burst=1))
    before = waits("recipient", "sleep")
    h.model.push(THREE_PARTS)
    h.client.send_message(CID, "tell me everything", message_id="wamid.1")
    h.run()
    assert [text[0] for _, text, _ in h.channel.sent] == ["A", "B", "C"]
    assert len(sleeps.slept) == 2 and all(0 < s <= 0.1 for s in sleeps.slept)
    assert waits("recipient", "sleep") == before + 2


def test_the_number_limit_spaces_every_recipient() -> None:
    h, sleeps = paced(PaceLimits(per_second=20, burst=1, recipient_per_second=0))
    start = time.monotonic()
    for i in range(5):
        h.client.send_message(f"4477009001{i:02d}", "hi", message_id=f"wamid.{i}")
    h.run()
    assert len(h.channel.sent) == 5 and time.monotonic() - start >= 4 * 0.05 * 0.9
    assert len(sleeps.slept) >= 3


def test_a_long_wait_hands_the_reply_to_a_later_delivery() -> None:
    h, sleeps = paced(PaceLimits(per_second=0, recipient_per_second=0.5, recipient_burst=1), max_sleep=0.2)
    h.client.send_message(CID, "one", message_id="wamid.1")
    h.run()
    before = waits("recipient", "retry")
    h.client.send_message(CID, "two", message_id="wamid.2")
    # The drain's own delivery is put off: a deliver task is scheduled with the wait as its countdown.
    assert h.run(defer=("deliver",)) == [("deliver", CID)]
    assert [text for _, text, _ in h.channel.sent] == ["ack:one"] and sleeps.slept == []
    assert waits("recipient", "retry") == before + 1
    kind, cid, countdown = h.scheduled[-1]
    assert (kind, cid) == ("deliver", CID) and 1.0 < countdown <= 2.0
    # Nothing is left in flight, no failure is counted, and the delivery lease is free for the retry.
    sent = raw(h.store).hgetall(h.store.keys(CID).sent)
    assert b"inflight" not in sent and b"failures" not in sent
    assert not raw(h.store).exists(h.store.keys(CID).dlease)
    with pytest.raises(RetryLater):
        h.service.deliver(CID)  # asked too early: put off again, still nothing sent
    time.sleep(countdown)
    assert h.service.deliver(CID) == 1
    assert [text for _, text, _ in h.channel.sent] == ["ack:one", "ack:two"]


def test_the_pacer_asks_again_after_a_recipients_wait() -> None:
    h, sleeps = paced(PaceLimits(per_second=0, recipient_per_second=5, recipient_burst=1))
    assert isinstance(h.channel, PacedChannel)
    pacer = h.channel.pacer
    assert pacer is not None
    assert pacer.admit("alice") == 0
    waited = pacer.admit("alice")
    assert 0.1 < waited <= 0.2 and len(sleeps.slept) == 1
