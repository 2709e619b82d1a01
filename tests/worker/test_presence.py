"""Presence: read receipts and the typing indicator around bursts and turns, against the loopback Cloud API."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from tests.support.fake_whatsapp import FakeWhatsApp
from tests.support.workers import wait_until
from worker.channels.channel import ConsoleChannel
from worker.channels.whatsapp import WhatsAppSender
from worker.service.presence import Presence, is_whatsapp_id
from worker.testing import RecordingChannel

CID = "447700900123"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def inline(post: Callable[[], None]) -> None:
    post()


def presence_count(outcome: str) -> float:
    return REGISTRY.get_sample_value("parley_presence_total", {"outcome": outcome}) or 0.0


@pytest.fixture
def api() -> Iterator[FakeWhatsApp]:
    a = FakeWhatsApp().start()
    yield a
    a.stop()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def whatsapp(api: FakeWhatsApp) -> WhatsAppSender:
    return WhatsAppSender(phone_number_id="106540352242922", access_token="tok", base_url=api.base_url)


def presence(api: FakeWhatsApp, clock: Clock, **kw: Any) -> Presence:
    """Posts run inline and no refresher thread starts: the test drives time and ticks."""
    return Presence(whatsapp(api), enabled=True, clock=clock, spawn=inline, autostart=False, **kw)


def read_ids(api: FakeWhatsApp) -> list[str]:
    return [r["body"]["message_id"] for r in api.reads]


def test_only_whatsapp_ids_are_marked() -> None:
    assert is_whatsapp_id("wamid.HBgLMTY1MDM4Nzk0MzkVAgARGBJDQjZCMzlEQUE4OTJBMTE4RTUA")
    assert not is_whatsapp_id(None) and not is_whatsapp_id("evt-1") and not is_whatsapp_id("3f2a-uuid")


def test_acknowledge_posts_one_read_with_typing_on_the_newest(api: FakeWhatsApp, clock: Clock) -> None:
    # WhatsApp marks the earlier messages of the chat read with the newest: one request per burst.
    presence(api, clock).acknowledge(CID, ["wamid.a", "game-event-7", "wamid.b"])
    assert api.reads == [{"path": "/v21.0/106540352242922/messages",
                          "body": {"messaging_product": "whatsapp", "status": "read", "message_id": "wamid.b",
                                   "typing_indicator": {"type": "text"}}}]


def test_a_deferred_burst_run_again_is_not_posted_again_until_the_refresh_is_due(
        api: FakeWhatsApp, clock: Clock) -> None:
    p = presence(api, clock, refresh_seconds=20.0)
    p.acknowledge(CID, ["wamid.a", "wamid.b"])
    clock.now += 5
    p.acknowledge(CID, ["wamid.a", "wamid.b"])
    assert read_ids(api) == ["wamid.b"]
    clock.now += 16  # 21 s since the indicator was shown: it is about to go
    p.acknowledge(CID, ["wamid.a", "wamid.b"])
    assert read_ids(api) == ["wamid.b", "wamid.b"]


def test_a_new_message_in_the_burst_is_posted_at_once(api: FakeWhatsApp, clock: Clock) -> None:
    p = presence(api, clock)
    p.acknowledge(CID, ["wamid.a"])
    clock.now += 1
    p.acknowledge(CID, ["wamid.a", "wamid.b"])
    assert read_ids(api) == ["wamid.a", "wamid.b"]


def test_typing_after_the_burst_was_acknowledged_does_not_post_again(api: FakeWhatsApp, clock: Clock) -> None:
    p = presence(api, clock)
    p.acknowledge(CID, ["wamid.a", "wamid.b"])
    clock.now += 2
    with p.typing(CID, "wamid.b"):
        assert p.tick() == 0
    assert read_ids(api) == ["wamid.b"]


def test_typing_for_a_new_message_posts_even_soon_after_the_last_indicator(api: FakeWhatsApp, clock: Clock) -> None:
    # The reply in between dismissed the indicator: the next turn shows it again.
    p = presence(api, clock)
    with p.typing(CID, "wamid.a"):
        pass
    clock.now += 3
    with p.typing(CID, "wamid.b"):
        pass
    assert read_ids(api) == ["wamid.a", "wamid.b"]


def test_typing_refreshes_every_refresh_seconds_until_exit(api: FakeWhatsApp, clock: Clock) -> None:
    p = presence(api, clock, refresh_seconds=20.0)
    with p.typing(CID, "wamid.a"):
        clock.now += 19
        assert p.tick() == 0
        clock.now += 1
        assert p.tick() == 1
        clock.now += 10
        assert p.tick() == 0
        clock.now += 10
        assert p.tick() == 1
    clock.now += 60
    assert p.tick() == 0  # the turn is over: nothing keeps the indicator up
    assert read_ids(api) == ["wamid.a"] * 3
    assert all(r["body"]["typing_indicator"] == {"type": "text"} for r in api.reads)


def test_a_typing_block_longer_than_the_refresh_interval_posts_again_from_the_thread(
        api: FakeWhatsApp, monkeypatch: pytest.MonkeyPatch) -> None:
    refresh = 0.2
    p = Presence(whatsapp(api), enabled=True, refresh_seconds=refresh)
    ticks: list[tuple[float, int]] = []  # (when it began, posts it started) for each tick of the refresher thread
    real_tick = p.tick

    def tick() -> int:
        began = time.monotonic()
        started = real_tick()
        ticks.append((began, started))
        return started

    monkeypatch.setattr(p, "tick", tick)  # before the thread starts: it calls this one
    with p.typing(CID, "wamid.slow"):
        assert wait_until(lambda: len(api.reads) >= 3, 5)
    ended = time.monotonic()
    assert set(read_ids(api)) == {"wamid.slow"} and sum(n for _, n in ticks) >= 2  # refreshes came from the thread

    def ticked_since_end(periods: float) -> Callable[[], bool]:
        return lambda: any(began - ended > periods * refresh for began, _ in ticks)

    # Once the thread has ticked for more than a refresh interval after the end, no tick begun after it started
    # a post; the posts started before it have all landed (settle); and none comes later.
    assert wait_until(ticked_since_end(1.5), 5)
    assert p.settle(CID, 5)
    settled = len(api.reads)
    assert wait_until(ticked_since_end(3), 5)
    assert [n for began, n in ticks if began > ended and n] == []
    assert p.settle(CID, 5) and len(api.reads) == settled


def test_exit_does_not_wait_for_a_slow_post(api: FakeWhatsApp) -> None:
    api.delay = 1.0
    p = Presence(whatsapp(api), enabled=True)
    started = time.monotonic()
    with p.typing(CID, "wamid.a"):
        pass
    p.acknowledge(CID, ["wamid.b"])
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize("message_id", [None, "evt-1", "game:theatre"])
def test_no_post_without_a_whatsapp_message(api: FakeWhatsApp, clock: Clock, message_id: str | None) -> None:
    p = presence(api, clock)
    with p.typing(CID, message_id):
        clock.now += 60
        assert p.tick() == 0
    p.acknowledge(CID, [message_id] if message_id else [])
    assert api.reads == []


def test_disabled_posts_nothing(api: FakeWhatsApp, clock: Clock) -> None:
    for p in (Presence(whatsapp(api), enabled=False, clock=clock, spawn=inline, autostart=False),
              Presence.disabled()):
        assert not p.enabled
        p.acknowledge(CID, ["wamid.a"])
        with p.typing(CID, "wamid.a"):
            clock.now += 60
            assert p.tick() == 0
    assert api.reads == [] and api.sent == []


def test_a_channel_without_receipts_turns_presence_off(clock: Clock) -> None:
    class Plain:
        def send_text(self, recipient: str, text: str, *, reply_to: str | None = None,
                      callback_data: str | None = None) -> str:
            return "x"

    assert not Presence(Plain(), enabled=True).enabled
    assert Presence(ConsoleChannel(), enabled=True).enabled  # a no-op, but it has them


def test_api_errors_are_swallowed_counted_and_never_fail_the_turn(api: FakeWhatsApp, clock: Clock) -> None:
    rejected = presence_count("rejected")
    api.fail_reads(131047, times=2)
    p = presence(api, clock)
    p.acknowledge(CID, ["wamid.a"])
    with p.typing(CID, "wamid.b"):
        pass
    assert presence_count("rejected") == rejected + 2 and api.reads == []


def test_a_channel_that_raises_is_counted_and_never_fails_the_turn(clock: Clock) -> None:
    class Broken(RecordingChannel):
        def mark_read(self, message_id: str, *, typing: bool) -> None:
            raise RuntimeError("bug")

    unexpected = presence_count("unexpected")
    p = Presence(Broken(), enabled=True, clock=clock, spawn=inline, autostart=False)
    p.acknowledge(CID, ["wamid.a"])
    with p.typing(CID, "wamid.b"):
        pass
    assert presence_count("unexpected") == unexpected + 2


def test_posts_in_flight_are_bounded(clock: Clock) -> None:
    started: list[Callable[[], None]] = []
    dropped = presence_count("dropped")
    channel = RecordingChannel()
    p = Presence(channel, enabled=True, clock=clock, spawn=started.append, autostart=False, max_in_flight=2)
    for i in range(3):
        p.acknowledge(f"c{i}", [f"wamid.{i}"])
    assert len(started) == 2 and presence_count("dropped") == dropped + 1
    for post in started:
        post()
    p.acknowledge("c2", ["wamid.2"])  # a slot is free again, and the dropped one was not marked
    started[2]()
    assert [m for m, _ in channel.read] == ["wamid.0", "wamid.1", "wamid.2"]


def test_memory_of_acknowledged_ids_is_bounded(clock: Clock) -> None:
    channel = RecordingChannel()
    p = Presence(channel, enabled=True, clock=clock, spawn=inline, autostart=False, max_remembered=2)
    for m in ("wamid.a", "wamid.b", "wamid.c"):
        p.acknowledge(CID, [m])
    p.acknowledge(CID, ["wamid.c"])  # remembered: no post
    p.acknowledge(CID, ["wamid.a"])  # forgotten: posted again (at worst one repeated receipt)
    assert [m for m, _ in channel.read] == ["wamid.a", "wamid.b", "wamid.c", "wamid.a"]


@pytest.mark.parametrize("on", [True, False])
def test_the_runtime_builds_presence_from_the_setting_and_gives_it_to_the_drainer(on: bool) -> None:
    from worker import ScriptedModel
    from worker.runtime import build_service
    from worker.settings import Settings

    settings = Settings(_env_file=None, whatsapp_phone_number_id="1", whatsapp_access_token="t",  # type: ignore[call-arg]
                        typing_indicator=on, redis_url="redis://127.0.0.1:9/0")
    service = build_service(settings, lambda *a, **k: None, model=ScriptedModel(default=lambda req: "x"), tools=())
    assert isinstance(service.channel, WhatsAppSender)
    assert service.presence.enabled is on and service.drainer.presence is service.presence


def test_a_service_built_without_presence_has_it_off() -> None:
    from tests.worker.conftest import make_harness

    h = make_harness()
    assert not h.service.presence.enabled and h.service.drainer.presence is h.service.presence


def test_settle_waits_for_a_post_under_way_so_the_reply_goes_after_it(api: FakeWhatsApp) -> None:
    api.delay = 0.3
    p = Presence(whatsapp(api), enabled=True)
    assert p.settle(CID, 0.01)  # nothing under way
    with p.typing(CID, "wamid.a"):
        pass
    assert not p.settle(CID, 0.01)
    assert p.settle("another-conversation", 0.01)
    assert p.settle(CID, 5) and read_ids(api) == ["wamid.a"]
    assert Presence.disabled().settle(CID, 0)
