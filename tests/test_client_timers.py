"""The producers' ``at=`` (inputs held until due), ``cancel_scheduled``, and the timer loop that fires them."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta, timezone

import fakeredis
import pytest

from worker.client import ConversationClient
from worker.envelopes.inputs import decode_envelope
from worker.errors import InboxFullError, InputError, InvalidScheduleError
from worker.service.timer_loop import TimerLoop
from worker.store.redis_store import ConversationStore, StoreLimits

CID = "447700900123"


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def setup() -> tuple[ConversationClient, ConversationStore, list[str]]:
    store = ConversationStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix=f"t{uuid.uuid4().hex[:6]}")
    woken: list[str] = []
    return ConversationClient(store, woken.append), store, woken


def soon(seconds: float = 60) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def test_each_input_kind_is_held_until_due_then_fired_once_and_woken(setup) -> None:  # type: ignore[no-untyped-def]
    client, store, woken = setup
    due = soon()
    sent = [client.send_event(CID, "Still there?", message_id="nudge-1", at=due),
            client.send_message(CID, "hi", message_id="m-1", at=due + timedelta(seconds=1)),
            client.reset(CID, message_id="r-1", at=due + timedelta(seconds=2))]
    assert all(s.scheduled and not s.duplicate and s.depth == 0 for s in sent) and woken == []
    assert store.inbox(CID) == [] and [t.message_id for t in store.scheduled(CID)] == ["nudge-1", "m-1", "r-1"]
    loop = TimerLoop(store, woken.append, clock=Clock(due.timestamp() + 5))
    assert loop.run_once() == 3 and woken == [CID]  # one wake-up: the mailbox was empty before the first
    kinds = [decode_envelope(e).kind for _, e in store.inbox(CID)]
    assert kinds == ["event", "message", "reset"] and loop.run_once() == 0
    assert store.last_inbound(CID) is None  # the player did not write when the held message fired


def test_scheduling_the_same_id_again_says_duplicate_and_holds_one(setup) -> None:  # type: ignore[no-untyped-def]
    client, store, _ = setup
    assert not client.send_event(CID, "a", message_id="n", at=soon()).duplicate
    assert client.send_event(CID, "a", message_id="n", at=soon(90)).duplicate
    assert len(store.scheduled(CID)) == 1


@pytest.mark.parametrize("at", [datetime(2030, 1, 1, 12, 0), "2030-01-01T12:00:00Z", 1893456000])
def test_a_naive_or_non_datetime_at_is_refused_naming_at_and_nothing_is_held(setup, at) -> None:  # type: ignore[no-untyped-def]
    client, store, woken = setup
    with pytest.raises(InvalidScheduleError) as err:
        client.send_event(CID, "x", at=at)
    assert err.value.field == "at" and isinstance(err.value, InputError)
    assert store.scheduled(CID) == [] and store.inbox(CID) == [] and woken == []


def test_an_at_more_than_a_year_ahead_is_refused_naming_at_and_nothing_is_held(setup) -> None:  # type: ignore[no-untyped-def]
    from worker.cli.scheduled import parse_when
    from worker.envelopes.due_time import MAX_AHEAD_S

    client, store, woken = setup
    for kind in ("event", "message", "reset"):
        with pytest.raises(InvalidScheduleError, match="more than a year ahead") as err:
            if kind == "event":
                client.send_event(CID, "x", at=soon(MAX_AHEAD_S + 60))
            elif kind == "message":
                client.send_message(CID, "x", at=datetime(2999, 1, 1, tzinfo=UTC))
            else:
                client.reset(CID, at=soon(MAX_AHEAD_S + 60))
        assert err.value.field == "at"
    assert store.scheduled(CID) == [] and store.inbox(CID) == [] and woken == []
    assert client.send_event(CID, "x", message_id="in-a-year", at=soon(MAX_AHEAD_S - 60)).scheduled
    with pytest.raises(InvalidScheduleError):  # the CLI's +N has the same bound
        parse_when(f"+{MAX_AHEAD_S + 1}")


def test_bad_text_with_at_is_refused_before_anything_is_held(setup) -> None:  # type: ignore[no-untyped-def]
    client, store, _ = setup
    with pytest.raises(InputError):
        client.send_event(CID, "", at=soon())
    assert store.scheduled(CID) == []


def test_a_time_now_or_past_is_due_at_once(setup) -> None:  # type: ignore[no-untyped-def]
    client, store, woken = setup
    done = client.send_event(CID, "x", message_id="e", at=datetime.now(timezone(timedelta(hours=-5))) - timedelta(1))
    assert not done.scheduled and done.depth == 1 and woken == [CID] and store.scheduled(CID) == []


def test_cancel_scheduled_is_true_once_and_the_cancelled_one_never_fires(setup) -> None:  # type: ignore[no-untyped-def]
    client, store, woken = setup
    due = soon()
    client.send_event(CID, "Still there?", message_id="nudge", at=due)
    assert client.cancel_scheduled(CID, "nudge") is True and client.cancel_scheduled(CID, "nudge") is False
    assert TimerLoop(store, woken.append, clock=Clock(due.timestamp() + 60)).run_once() == 0
    assert store.inbox(CID) == [] and woken == []


def test_a_reset_sent_at_once_drops_the_pending_timers(setup) -> None:  # type: ignore[no-untyped-def]
    client, store, _ = setup
    client.send_event(CID, "old game's nudge", message_id="nudge", at=soon())
    client.reset(CID)
    assert store.scheduled(CID) == []
    client.send_event(CID, "new game's nudge", message_id="nudge-2", at=soon())
    assert [t.message_id for t in store.scheduled(CID)] == ["nudge-2"]


def test_a_retried_reset_leaves_the_timers_held_since_the_first(setup) -> None:  # type: ignore[no-untyped-def]
    """A producer's retry of a reset (the same message id, e.g. after an HTTP timeout) is a duplicate: nothing is
    queued, and the timers the game held after the first reset joined the order stay held."""
    client, store, _ = setup
    client.send_event(CID, "old game's nudge", message_id="nudge", at=soon())
    assert client.reset(CID, message_id="r1").duplicate is False
    client.send_event(CID, "new game's nudge", message_id="nudge-2", at=soon())
    assert client.reset(CID, message_id="r1").duplicate is True
    assert [t.message_id for t in store.scheduled(CID)] == ["nudge-2"]


def test_a_reset_refused_for_a_full_mailbox_keeps_the_pending_timers() -> None:
    """A reset the mailbox has no room for never joined the order: the game's timers stay held (before, they
    were dropped by a step of their own ahead of the refused accept)."""
    store = ConversationStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix=f"t{uuid.uuid4().hex[:6]}",
                              limits=StoreLimits(max_inbox=1))
    client = ConversationClient(store, lambda cid: None)
    client.send_message(CID, "hello", message_id="m1")
    client.send_event(CID, "nudge", message_id="nudge", at=soon())
    with pytest.raises(InboxFullError):
        client.reset(CID, message_id="r1")
    assert [t.message_id for t in store.scheduled(CID)] == ["nudge"]


def test_delete_drops_the_pending_timers(setup) -> None:  # type: ignore[no-untyped-def]
    client, store, _ = setup
    client.send_event(CID, "x", message_id="nudge", at=soon())
    client.delete(CID)
    assert store.scheduled(CID) == [] and store.timer_conversations() == 0


def test_parley_scheduled_lists_the_pending_timers_and_cancel_drops_one(setup, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from worker import cli
    from worker.cli import scheduled as timer_commands

    client, store, _ = setup
    client.send_event(CID, "Still there?\x1b[2J", message_id="nudge", at=soon(120))
    client.reset(CID, message_id="r", at=soon(600))
    rows = timer_commands.pending_timers(store, CID)
    assert [(r["kind"], r["message_id"]) for r in rows] == [("event", "nudge"), ("reset", "r")]
    assert 100 < rows[0]["in_seconds"] <= 120 and rows[0]["due"].endswith("+00:00")
    monkeypatch.setattr("worker.queue.connections.build_store", lambda settings: store)
    monkeypatch.setattr("worker.client.ConversationClient.from_env", classmethod(lambda cls: client))
    assert cli.main(["scheduled", CID]) == 0
    out = capsys.readouterr().out
    assert "nudge" in out and "reset" in out and "\x1b" not in out  # the text is escaped for the terminal
    assert cli.main(["cancel", CID, "nudge"]) == 0 and cli.main(["cancel", CID, "nudge"]) == 1
    assert [t.message_id for t in store.scheduled(CID)] == ["r"]


def test_parley_scheduled_shows_a_held_events_respond_and_key_after_the_other_columns(setup, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from worker import cli
    from worker.cli import scheduled as timer_commands

    client, store, _ = setup
    client.send_event(CID, "Round ends in 5 minutes", message_id="ask", respond=True, at=soon(60))
    client.send_event(CID, "Target: the theatre", message_id="fact", key="target", at=soon(120))
    client.send_event(CID, "Both", message_id="both", key="round", respond=True, at=soon(180))
    client.send_event(CID, "Plain", message_id="plain", at=soon(240))
    rows = timer_commands.pending_timers(store, CID)
    assert [(r["message_id"], r["respond"], r["key"]) for r in rows] == [
        ("ask", True, None), ("fact", False, "target"), ("both", True, "round"), ("plain", False, None)]
    assert list(rows[0]) == ["due", "in_seconds", "kind", "message_id", "text", "respond", "key"]  # added at the end
    monkeypatch.setattr("worker.queue.connections.build_store", lambda settings: store)
    assert cli.main(["scheduled", CID]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("  event    ask  Round ends in 5 minutes  [respond]")
    assert lines[1].endswith("  event    fact  Target: the theatre  [key=target]")
    assert lines[2].endswith("  event    both  Both  [respond, key=round]")
    assert lines[3].endswith("  event    plain  Plain")  # a line without them reads as before


def test_parley_send_event_and_reset_take_at_and_hold_the_input(setup, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from worker import cli

    client, store, woken = setup
    monkeypatch.setattr("worker.client.ConversationClient.from_env", classmethod(lambda cls: client))
    assert cli.main(["send", CID, "Any hint?", "--id", "m", "--at", "+5m"]) == 0
    assert cli.main(["event", CID, "Round ends", "--id", "e", "--respond", "--at", "+2h"]) == 0
    assert cli.main(["reset", CID, "--at", (datetime.now(UTC) + timedelta(days=1)).isoformat()]) == 0
    held = store.scheduled(CID)
    assert [decode_envelope(t.envelope).kind for t in held] == ["message", "event", "reset"] and woken == []
    now_ms = datetime.now(UTC).timestamp() * 1000
    assert 290_000 < held[0].due_ms - now_ms <= 300_000 and 7_190_000 < held[1].due_ms - now_ms <= 7_200_000
    assert decode_envelope(held[1].envelope).respond is True
    assert cli.main(["send", CID, "now"]) == 0 and woken == [CID]  # without --at: at once, as before


@pytest.mark.parametrize("when", ["2026-11-25T19:30:00", "tomorrow", "+", "+5d", "+99999999"])
def test_parley_at_refuses_a_naive_or_unreadable_time_and_holds_nothing(setup, monkeypatch, capsys, when) -> None:  # type: ignore[no-untyped-def]
    from worker import cli

    client, store, woken = setup
    monkeypatch.setattr("worker.client.ConversationClient.from_env", classmethod(lambda cls: client))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["send", CID, "Any hint?", "--at", when])
    assert exit_.value.code == 2 and "--at" in capsys.readouterr().err
    assert store.scheduled(CID) == [] and woken == []


def test_the_inlet_takes_at_as_the_http_api_does() -> None:
    from worker.inlet.messages import Unacceptable, parse_message

    msg = parse_message(b'{"kind": "event", "conversation_id": "447700900123", "text": "Still there?", '
                        b'"message_id": "nudge", "at": "2030-01-01T12:00:00+01:00"}')
    assert msg.body.arguments()["at"] == datetime(2030, 1, 1, 11, 0, tzinfo=UTC)
    with pytest.raises(Unacceptable, match="at"):
        parse_message(b'{"kind": "reset", "conversation_id": "447700900123", "at": "2030-01-01T12:00:00"}')


def test_a_scheduled_answered_event_ends_a_burst_hold_when_it_fires_and_wakes(setup) -> None:  # type: ignore[no-untyped-def]
    client, store, woken = setup
    due = soon()
    client.send_event(CID, "Still there?", message_id="nudge-1", at=due)  # a silent one
    client.send_event(CID, "You are near the theatre", message_id="nudge-2", respond=True, at=due + timedelta(1))
    client.send_message(CID, "wait", message_id="m-1")
    begin = store.begin(CID, 10_000)
    store.defer(CID, begin.token, "m-1", 60_000)  # the burst's quiet period is being waited out
    woken.clear()
    assert TimerLoop(store, woken.append, clock=Clock(due.timestamp() + 5)).run_once() == 1
    assert woken == [] and store.begin(CID, 10_000).status == "held"  # a silent event leaves the wait running
    assert TimerLoop(store, woken.append, clock=Clock(due.timestamp() + 86_405)).run_once() == 1
    assert woken == [CID] and store.begin(CID, 10_000).status == "ok"  # ended, and a worker woken for it


def test_a_redis_outage_logs_one_warning_then_one_line_when_back_not_a_traceback_a_pass(caplog) -> None:  # type: ignore[no-untyped-def]
    server = fakeredis.FakeServer()
    store = ConversationStore(fakeredis.FakeRedis(server=server), prefix=f"t{uuid.uuid4().hex[:6]}")
    client = ConversationClient(store, lambda cid: None)
    woken: list[str] = []
    due = soon(-1)
    client.send_event(CID, "nudge", message_id="nudge", at=soon())
    store.schedule(CID, b"late", "late", int(due.timestamp() * 1000))
    loop = TimerLoop(store, woken.append)
    caplog.set_level(logging.INFO, logger="parley.timers")
    server.connected = False
    for _ in range(5):
        loop.run_guarded()
    server.connected = True
    loop.run_guarded()
    loop.run_guarded()
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in lines] == [logging.WARNING, logging.INFO], lines
    assert "unavailable" in lines[0][1] and "back" in lines[1][1]
    assert not any(r.exc_info for r in caplog.records) and woken == [CID]


def test_an_unexpected_timer_pass_failure_keeps_its_traceback_every_pass(setup, caplog) -> None:  # type: ignore[no-untyped-def]
    _, store, woken = setup
    loop = TimerLoop(store, woken.append)

    def broken(*_args: object) -> list[tuple[str, float]]:
        raise RuntimeError("a bug")

    loop.store = type("Broken", (), {"due_conversations": staticmethod(broken)})()  # type: ignore[assignment]
    loop.run_guarded()
    loop.run_guarded()
    assert [r.levelno for r in caplog.records] == [logging.ERROR, logging.ERROR]
    assert all(r.exc_info for r in caplog.records)


def test_parley_reset_forget_queues_a_reset_that_erases_the_archive(setup, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from worker import cli

    client, store, _ = setup
    monkeypatch.setattr("worker.client.ConversationClient.from_env", classmethod(lambda cls: client))
    assert cli.main(["reset", CID, "--at", "+5m", "--forget"]) == 0
    assert cli.main(["reset", CID, "--at", "+6m"]) == 0
    assert [decode_envelope(t.envelope).forget for t in store.scheduled(CID)] == [True, None]
