"""A reply part left in flight by a crashed deliverer, with status webhooks: marked sent when a status shows it
reached WhatsApp, resent only when none came within the grace period (no worker waits meanwhile), resent at once
without status webhooks. The "ingress" here records statuses the way the real one does, from the callback data
each part was sent with."""

from __future__ import annotations

import time

import pytest

from tests.configs import bare_config
from tests.worker.conftest import Harness, make_harness
from worker import metrics
from worker.envelopes.inputs import parse_part_callback, part_callback
from worker.service import RetryLater
from worker.testing import RecordingChannel

CID = "447700900123"
LONG = "\n\n".join(f"paragraph {i}: " + "word " * 300 for i in range(6))  # three parts, each its own text


class Killed(BaseException):
    """The worker process dies (a BaseException: nothing in the deliverer catches it, as nothing survives SIGKILL)."""


class CrashingChannel(RecordingChannel):
    """Records every send; ``crash_after_send`` / ``crash_before_send`` kill the worker at that send (0-based)."""

    def __init__(self) -> None:
        super().__init__()
        self.crash_after_send: int | None = None
        self.crash_before_send: int | None = None
        self.attempts = 0

    def send_text(self, recipient: str, text: str, *, reply_to: str | None = None,
                  callback_data: str | None = None) -> str:
        n, self.attempts = self.attempts, self.attempts + 1
        if n == self.crash_before_send:
            raise Killed
        wamid = super().send_text(recipient, text, reply_to=reply_to, callback_data=callback_data)
        if n == self.crash_after_send:
            raise Killed  # WhatsApp has the message; the sent mark never happens
        return wamid


def harness(*, webhooks: bool = True, grace_ms: int = 60_000) -> tuple[Harness, CrashingChannel]:
    ch = CrashingChannel()
    h = make_harness(channel=ch, config=bare_config(deliver_inline=False, status_webhooks=webhooks,
                                                      resend_grace_ms=grace_ms))
    return h, ch


def webhook(h: Harness, ch: CrashingChannel, send: int, status: str) -> None:
    """WhatsApp's status webhook for send number ``send``, as the ingress records it."""
    ref = parse_part_callback(ch.callbacks[send])
    assert ref is not None
    h.store.record_status(ref.conversation_id, f"rec-{send + 1}", status, reply_id=ref.reply_id, part=ref.part)


def crash_delivering(h: Harness) -> None:
    with pytest.raises(Killed):
        h.service.deliver(CID)


def crashed(*, after_send: int | None = None, before_send: int | None = None, text: str = "one", mid: str = "m1",
            **kw: object) -> tuple[Harness, CrashingChannel]:
    """A harness whose first delivery of ``text`` killed the worker right after (or before) send number n."""
    h, ch = harness(**kw)  # type: ignore[arg-type]
    queue(h, text, mid)
    ch.crash_after_send, ch.crash_before_send = after_send, before_send
    crash_delivering(h)
    return h, ch


def counters() -> tuple[float, float, float]:
    return (metrics.DUPLICATE_WINDOW._value.get(), metrics.DUPLICATE_SENDS_AVOIDED._value.get(),
            metrics.INFLIGHT_RECHECKS._value.get())


def since(before: tuple[float, float, float]) -> tuple[int, int, int]:
    return tuple(int(a - b) for a, b in zip(counters(), before, strict=True))  # type: ignore[return-value]


def queue(h: Harness, text: str = "one", mid: str = "m1") -> None:
    h.client.send_message(CID, text, message_id=mid)
    h.service.drain(CID)


def test_every_part_is_sent_with_callback_data_naming_it() -> None:
    h, ch = harness()
    queue(h, LONG[:6000], "wamid.in")  # about 6,000 characters: two parts
    h.service.deliver(CID)
    assert len(ch.sent) >= 2
    assert ch.callbacks == [part_callback(CID, "wamid.in", i) for i in range(len(ch.sent))]


def test_a_part_that_reached_whatsapp_is_marked_sent_not_resent() -> None:
    h, ch = crashed(after_send=0)
    webhook(h, ch, 0, "delivered")  # `sent` got lost or comes later: any status proves WhatsApp took it
    before = counters()
    assert h.service.deliver(CID) == 0
    assert [t for _, t, _ in ch.sent] == ["ack:one"] and h.store.outbox_depth(CID) == 0
    assert h.store.delivered(CID) == [("m1", ["rec-1"])]
    assert since(before) == (0, 1, 0)


def test_no_status_within_the_grace_means_one_resend_and_no_worker_waits_for_it() -> None:
    h, ch = crashed(before_send=0, grace_ms=400)  # the worker died before the HTTP call: no status will come
    before = counters()
    started = time.monotonic()
    with pytest.raises(RetryLater) as first:
        h.service.deliver(CID)
    assert time.monotonic() - started < 0.2 and 0 < first.value.countdown <= 0.4  # a later look, not a wait
    assert ch.sent == [] and h.store.outbox_depth(CID) == 1
    time.sleep(0.45)
    assert h.service.deliver(CID) == 1
    assert [t for _, t, _ in ch.sent] == ["ack:one"] and h.store.outbox_depth(CID) == 0
    assert since(before) == (1, 0, 1)


def test_a_status_that_comes_during_the_grace_ends_the_wait() -> None:
    h, ch = crashed(after_send=0, grace_ms=60_000)
    before = counters()
    with pytest.raises(RetryLater) as wait:
        h.service.deliver(CID)
    assert wait.value.countdown == 15.0  # a quarter of the grace: several looks before it runs out
    webhook(h, ch, 0, "sent")
    assert h.service.deliver(CID) == 0
    assert len(ch.sent) == 1 and h.store.delivered(CID) == [("m1", ["rec-1"])]
    assert since(before) == (0, 1, 1)


def test_the_grace_runs_from_the_first_look_whoever_looks_again() -> None:
    """Each look is a new task (maybe on another worker): the clock is in Redis, started by the first one. Had a
    later look restarted it, that look would be told the whole grace again, and a look once the grace counted from
    the first one ran out would be refused again. (A grace under 500 ms: each countdown is exactly what is left.)"""
    grace = 0.4
    h, ch = crashed(before_send=0, grace_ms=int(grace * 1000))
    with pytest.raises(RetryLater) as first:
        h.service.deliver(CID)
    first_done = time.monotonic()  # the clock in Redis started before this
    assert first.value.countdown <= grace and ch.sent == []
    time.sleep(0.1)  # the next look comes later, from another task
    looked = time.monotonic()
    try:
        h.service.deliver(CID)
    except RetryLater as again:
        # Told only what is left: at least the time between the two looks is counted (1 ms: Redis's rounding).
        assert again.countdown <= grace - (looked - first_done) + 0.001, (again.countdown, looked - first_done)
        assert ch.sent == []
        time.sleep(again.countdown + 0.005)  # a retry after its countdown: the grace from the first look is over
        assert h.service.deliver(CID) == 1
    else:  # the machine stalled past the whole grace between the looks: the second look resent at once
        assert time.monotonic() - first_done >= grace - 0.001
    assert [t for _, t, _ in ch.sent] == ["ack:one"] and h.store.outbox_depth(CID) == 0


def test_without_status_webhooks_the_part_is_resent_at_once_and_counted() -> None:
    h, ch = crashed(after_send=0, webhooks=False)
    webhook(h, ch, 0, "read")  # recorded, but nobody said an ingress runs: not consulted
    before = counters()
    assert h.service.deliver(CID) == 1
    assert [t for _, t, _ in ch.sent] == ["ack:one", "ack:one"]  # today's bounded duplicate
    assert since(before) == (1, 0, 0)


def test_a_long_reply_resumes_after_the_part_that_reached_whatsapp() -> None:
    h, ch = crashed(after_send=1, text=LONG, mid="wamid.in")  # three parts
    parts = len(ch.sent)
    assert parts == 2
    webhook(h, ch, 1, "sent")
    h.service.deliver(CID)
    assert len(ch.sent) == 3 and len({t for _, t, _ in ch.sent}) == 3  # part 2 only: nothing sent twice
    assert ch.callbacks == [part_callback(CID, "wamid.in", i) for i in range(3)]
    assert h.store.delivered(CID) == [("wamid.in", ["rec-1", "rec-2", "rec-3"])]


def test_a_status_of_an_earlier_part_proves_nothing_about_the_one_in_flight() -> None:
    # Part 0 went out and was marked sent; the worker died before part 1's call.
    h, ch = crashed(before_send=1, text=LONG, mid="wamid.in", grace_ms=60_000)
    webhook(h, ch, 0, "read")  # the player read part 0
    with pytest.raises(RetryLater):
        h.service.deliver(CID)
    assert len(ch.sent) == 1
