"""The lease heartbeat: a turn or a send longer than the lease keeps its lease, a stalled worker loses it.

The lease is short (a dead worker's conversations must be taken over soon); a worker alive and busy renews it.
These tests shrink the lease to 0.6 s so that "longer than the lease" is quick.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from tests.configs import bare_config
from tests.support.store_kit import raw
from tests.support.workers import wait_until
from tests.worker.conftest import make_harness
from worker import ScriptedModel, metrics
from worker.conversation.model import ModelRequest
from worker.service import ConversationService, Heartbeat
from worker.service.heartbeat import Beat
from worker.testing import RecordingChannel

CID = "447700900321"
LEASE_MS = 600


def _held(started: threading.Event, release: threading.Event):  # type: ignore[no-untyped-def]
    """A model call that lasts until the test releases it (at most 30 s)."""
    def answer(req: ModelRequest) -> str:
        started.set()
        release.wait(30)
        return "ack:" + req.messages[-1].content
    return answer


def _quick(req: ModelRequest) -> str:
    return "ack:" + req.messages[-1].content


def _turned_away_past_the_lease(other: Callable[[str], int], began: float, lease_key: str, store: Any) -> int:
    """Until more than two lease periods have passed since ``began``, another worker finds nothing to do and the
    lease is still held; returns how many times it looked."""
    looks = 0
    while time.monotonic() - began < 2 * LEASE_MS / 1000:
        assert other(CID) == 0
        assert raw(store).exists(lease_key)
        looks += 1
        time.sleep(0.05)
    return looks


def _second_worker(first: ConversationService, heartbeat: Heartbeat | None = None) -> ConversationService:
    """Another worker process over the same Redis: its own service, its own heartbeat."""
    return ConversationService(first.store, first.chat, first.channel, first.wake, first.config, heartbeat=heartbeat)


def _in_thread(fn, *args):  # type: ignore[no-untyped-def]
    out: dict[str, object] = {}

    def run() -> None:
        try:
            out["result"] = fn(*args)
        except BaseException as exc:
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_a_turn_longer_than_the_lease_keeps_its_lease_and_commits() -> None:
    started, release = threading.Event(), threading.Event()
    h = make_harness(ScriptedModel(default=_held(started, release)), config=bare_config(lease_ms=LEASE_MS))
    h.client.send_message(CID, "slow one", message_id="m1")
    stale = metrics.STALE_COMMITS._value.get()
    first, out = _in_thread(h.service.drain, CID)
    assert started.wait(5)
    began = time.monotonic()
    other = _second_worker(h.service)
    # The model call is still running (held): well past the lease, another worker is turned away.
    assert _turned_away_past_the_lease(other.drain, began, h.store.keys(CID).lease, h.store) >= 2
    assert first.is_alive() and h.store.inbox_depth(CID) == 1
    release.set()
    first.join(10)
    assert out == {"result": 1}
    assert len(h.model.requests) == 1 and metrics.STALE_COMMITS._value.get() == stale
    assert [t for _, t, _ in h.channel.sent] == ["ack:slow one"]
    assert not raw(h.store).exists(h.store.keys(CID).lease)  # given up at the end, not kept alive by a late beat


def test_a_stalled_worker_without_heartbeat_loses_the_lease_and_its_commit_is_refused() -> None:
    started, release = threading.Event(), threading.Event()
    stalled = Heartbeat(LEASE_MS / 3000, 600, autostart=False)  # a frozen process: its heartbeat never runs
    h = make_harness(ScriptedModel([_held(started, release)], default=_quick), config=bare_config(lease_ms=LEASE_MS))
    worker_a = _second_worker(h.service, heartbeat=stalled)
    h.client.send_message(CID, "first", message_id="m1")
    stale = metrics.STALE_COMMITS._value.get()
    a, out = _in_thread(worker_a.drain, CID)
    assert started.wait(5)
    assert wait_until(lambda: not raw(h.store).exists(h.store.keys(CID).lease), 10)  # the lease ran out
    assert a.is_alive()  # the stalled worker is still in its model call
    assert h.service.drain(CID) == 1  # another worker takes the input over and commits it
    release.set()
    a.join(10)
    assert out == {"result": 0}  # the stalled worker's commit was refused by the fence
    assert metrics.STALE_COMMITS._value.get() == stale + 1
    assert [t for _, t, _ in h.channel.sent] == ["ack:first"]
    assert h.store.inbox_depth(CID) == 0 and len(h.store.delivered(CID)) == 1


def test_a_send_longer_than_the_delivery_lease_is_not_resent_by_another_worker() -> None:
    sending, release = threading.Event(), threading.Event()

    class SlowChannel(RecordingChannel):
        def send_text(self, recipient: str, text: str, *, reply_to: str | None = None,
                      callback_data: str | None = None) -> str:
            sending.set()
            release.wait(30)  # the send lasts until the test releases it
            return super().send_text(recipient, text, reply_to=reply_to)

    h = make_harness(channel=SlowChannel(), config=bare_config(lease_ms=LEASE_MS, deliver_inline=False))
    h.client.send_message(CID, "hello", message_id="m1")
    h.service.drain(CID)
    duplicates = metrics.DUPLICATE_WINDOW._value.get()
    first, out = _in_thread(h.service.deliver, CID)
    assert sending.wait(5)
    began = time.monotonic()
    other = _second_worker(h.service)
    # The send is still in flight (held): well past the lease, it is neither taken over nor resent.
    assert _turned_away_past_the_lease(other.deliver, began, h.store.keys(CID).dlease, h.store) >= 2
    assert first.is_alive() and h.channel.sent == []
    release.set()
    first.join(10)
    assert out == {"result": 1}
    assert [t for _, t, _ in h.channel.sent] == ["ack:hello"]
    assert metrics.DUPLICATE_WINDOW._value.get() == duplicates
    assert not raw(h.store).exists(h.store.keys(CID).dlease)


def test_a_beat_landing_after_the_lease_was_given_up_does_not_take_it_back(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The heartbeat may renew between the drain's last commit (which gives the lease up) and the drain's end;
    renewing then would take the lease back and hide the conversation from the next drain and the sweeper for
    a whole lease period."""
    hb = Heartbeat(LEASE_MS / 3000, 600, autostart=False)
    h = make_harness(config=bare_config(lease_ms=LEASE_MS))
    svc = _second_worker(h.service, heartbeat=hb)
    real_stop = hb.stop
    renewed: list[bool] = []

    def tick_then_stop(beat):  # type: ignore[no-untyped-def]
        renewed.append(beat.beat(time.monotonic(), 600))  # a tick in that window
        real_stop(beat)

    monkeypatch.setattr(hb, "stop", tick_then_stop)
    h.client.send_message(CID, "hi", message_id="m1")
    assert svc.drain(CID) == 1
    assert renewed and not any(renewed)
    assert not raw(h.store).exists(h.store.keys(CID).lease)
    h.client.send_message(CID, "next", message_id="m2")
    assert svc.drain(CID) == 1  # nobody holds the conversation


def test_renewal_stops_when_another_worker_took_the_lease_and_after_max_hold() -> None:
    calls: list[str] = []

    def renew(name: str, still_ours: bool):  # type: ignore[no-untyped-def]
        def call() -> bool:
            calls.append(name)
            return still_ours
        return call

    hb = Heartbeat(0.0, 0.2, autostart=False)
    taken = hb.start(renew("taken", False), "drain")
    kept = hb.start(renew("kept", True), "drain")
    assert hb.tick() == 1 and sorted(calls) == ["kept", "taken"]
    assert taken.active is False and kept.active is True
    assert hb.tick() == 1 and sorted(calls) == ["kept", "kept", "taken"]  # the refused one is renewed no more
    time.sleep(0.25)  # no commit for longer than max_hold: a stuck turn lets its lease run out
    assert hb.tick() == 0 and len(calls) == 3 and kept.active is False


def test_holding_stops_the_beat_before_it_gives_the_lease_up_and_only_on_an_error() -> None:
    hb = Heartbeat(0.0, 60.0, autostart=False)
    seen: list[str] = []
    beats: list[Beat] = []

    def release() -> None:
        seen.append(f"release (renewing: {beats[0].active}, {hb.tick()} renewed)")

    with hb.holding(lambda: True, release, "drain") as beat:
        beats.append(beat)
        assert beat.active and hb.tick() == 1
    assert not beat.active and hb.tick() == 0 and seen == []  # a clean end: the body gave the lease up itself
    beats.clear()
    try:
        with hb.holding(lambda: True, release, "drain") as beat:
            beats.append(beat)
            raise KeyError("boom")
    except KeyError:
        pass
    else:
        raise AssertionError("the error was swallowed")
    assert seen == ["release (renewing: False, 0 renewed)"]


def test_committing_restarts_the_stuck_turn_clock_only_when_the_commit_returned() -> None:
    hb = Heartbeat(0.0, 60.0, autostart=False)
    beat = hb.start(lambda: True, "drain")
    beat.since = 0.0
    try:
        with beat.committing():
            raise ValueError("the store refused")
    except ValueError:
        pass
    assert beat.since == 0.0
    with beat.committing(), beat.committing():  # re-entrant: a commit inside another's guard
        pass
    assert beat.since > 0.0
    done = threading.Event()
    threading.Thread(target=lambda: (beat.end(), done.set()), daemon=True).start()  # the lock was released
    assert done.wait(5) and not beat.active


def test_a_beat_held_and_committed_is_freed_without_the_cycle_collector() -> None:
    """Two beats a turn: left in a reference cycle, each took its lock and renew closures to the cyclic collector,
    whose full passes over a busy worker's heap cost more CPU than the turns' own Redis calls (bench/README.md)."""
    import gc
    import weakref

    hb = Heartbeat(0.0, 60.0, autostart=False)
    gc.disable()
    try:
        with hb.holding(lambda: True, lambda: None, "drain") as beat:
            with beat.committing():
                pass
            hb.stop(beat)
        gone = weakref.ref(beat)
        del beat
        assert gone() is None  # freed by its reference count alone
    finally:
        gc.enable()
