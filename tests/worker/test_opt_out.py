"""A player's opt-out through the service, on a redis-server of the test's own: STOP (any configured phrase, matched
as reset phrases are, inside a burst too) gets one confirmation and no model call; then an answered event, a timer,
an operator's message for them is applied with nothing sent (counted) while their own messages are still answered;
START (or any message, with PARLEY_OPT_OUT_UNTIL_MESSAGE) opts them in; the marker outlives a delete and the idle TTL;
a template is not sent to a player who opted out (or who stopped marketing messages); a reply queued before a number
change goes to the new number; ``parley optout`` / ``optin``; the summary says ``opted_out``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
import redis
from prometheus_client import REGISTRY

from tests.configs import bare_burst, bare_config
from tests.support.fake_whatsapp import FakeWhatsApp
from tests.support.redis_server import RedisServer, redis_of_its_own
from tests.support.store_kit import raw
from tests.worker.conftest import Harness, make_harness
from worker import cli
from worker.channels.whatsapp import WhatsAppSender
from worker.channels.window import ServiceWindow, Template
from worker.client.summary import summary
from worker.conversation.state import decode_state
from worker.envelopes.inputs import decode_dead_letter
from worker.service import ServiceConfig
from worker.service.timer_loop import TimerLoop
from worker.settings import OptOut
from worker.store.redis_store import StoreLimits

CID = "447700900123"
STOP_REPLY = OptOut().reply
START_REPLY = OptOut().in_reply

server = pytest.fixture(redis_of_its_own)


@pytest.fixture
def r(server: RedisServer) -> Iterator[redis.Redis]:
    client = server.client()
    yield client
    client.close()


def harness(r: redis.Redis, config: ServiceConfig | None = None, **kw: object) -> Harness:
    return make_harness(redis_client=r, config=config, **kw)  # type: ignore[arg-type]


def texts(h: Harness) -> list[str]:
    return [t for _, t, _ in h.channel.sent]


def held_back(kind: str) -> float:
    return REGISTRY.get_sample_value("parley_opted_out_sends_total", {"kind": kind}) or 0.0


def test_stop_gets_one_confirmation_then_nothing_business_initiated_goes_out(r: redis.Redis) -> None:
    h = harness(r)
    h.client.send_message(CID, "hi", message_id="m0")
    h.run()
    h.client.send_message(CID, "STOP!", message_id="m1")
    h.run()
    assert texts(h) == ["ack:hi", STOP_REPLY] and len(h.model.requests) == 1  # no model call for the STOP
    events, operators = held_back("event"), held_back("operator")
    h.client.send_event(CID, "A new clue is out", message_id="e1", respond=True)
    h.client.send_operator_message(CID, "Sam here from the game team.", message_id="op1")
    h.run()
    assert texts(h) == ["ack:hi", STOP_REPLY] and len(h.model.requests) == 1  # applied, nothing sent
    assert (held_back("event"), held_back("operator")) == (events + 1, operators + 1)
    said = [(m.role, m.content) for m in decode_state(h.store.read_state(CID).blob).messages]
    assert ("event", "A new clue is out") in said and ("assistant", "Sam here from the game team.") in said
    assert h.store.inbox_depth(CID) == 0 and not h.store.dead_letters(CID)


def test_a_timer_for_an_opted_out_player_fires_and_sends_nothing(r: redis.Redis) -> None:
    h = harness(r)
    h.client.send_message(CID, "unsubscribe", message_id="m1")
    h.run()
    due = datetime.now(UTC) + timedelta(minutes=5)
    h.client.send_event(CID, "Nudge: you stopped moving", message_id="t1", respond=True, at=due)
    before = held_back("event")
    assert TimerLoop(h.store, lambda cid: h.woken.append(("drain", cid)),
                     clock=lambda: due.timestamp() + 1).run_once() == 1
    h.run()
    assert texts(h) == [STOP_REPLY] and not h.model.requests and held_back("event") == before + 1


def test_their_own_message_is_still_answered_and_with_until_message_it_opts_them_in(r: redis.Redis) -> None:
    h = harness(r)
    h.client.send_message(CID, "stop", message_id="m1")
    h.run()
    assert h.store.opted_out(CID)
    h.client.send_message(CID, "actually, where is the clue?", message_id="m2")
    h.run()
    assert texts(h) == [STOP_REPLY, "ack:actually, where is the clue?"] and not h.store.opted_out(CID)
    h.client.send_event(CID, "A new clue is out", message_id="e1", respond=True)
    h.run()
    assert texts(h)[-1] == "ack:A new clue is out"


def test_without_until_message_only_start_opts_them_in(r: redis.Redis) -> None:
    h = harness(r, replace(bare_config(system_prompt="You are a test."), opt_out=OptOut(until_message=False)))
    h.client.send_message(CID, "Stop.", message_id="m1")
    h.client.send_message(CID, "where is the clue?", message_id="m2")
    h.run()
    assert texts(h) == [STOP_REPLY, "ack:where is the clue?"] and h.store.opted_out(CID)  # answered, still out
    h.client.send_message(CID, "START", message_id="m3")
    h.run()
    assert texts(h)[-1] == START_REPLY and not h.store.opted_out(CID) and len(h.model.requests) == 1


def test_stop_inside_a_burst_opts_out_with_one_confirmation_for_the_burst(r: redis.Redis) -> None:
    quiet = 0.3
    h = harness(r, bare_config(system_prompt="You are a test.", burst=bare_burst(quiet=quiet, max_wait=5.0)))
    h.client.send_message(CID, "this game is too much", message_id="m1")
    h.client.send_message(CID, "Arrêt", message_id="m2")  # another language's STOP
    h.run()
    time.sleep(quiet + 0.05)
    h.woken.append(("drain", CID))
    h.run()
    assert texts(h) == [STOP_REPLY] and not h.model.requests and h.store.opted_out(CID)
    assert h.store.inbox_depth(CID) == 0


def test_the_marker_outlives_a_delete_and_the_idle_ttl(r: redis.Redis) -> None:
    h = harness(r, limits=StoreLimits(idle_ttl_ms=60_000))
    h.client.send_message(CID, "STOP", message_id="m1")
    h.run()
    key = h.store.keys(CID).opt_out
    assert raw(h.store).pttl(key) == -1  # no expiry: the idle TTL never takes it
    assert raw(h.store).pttl(h.store.keys(CID).inbound) > 0  # while the conversation's keys have one
    h.client.delete(CID)
    assert h.store.opted_out(CID) and raw(h.store).exists(h.store.keys(CID).tomb)
    assert summary(h.store, CID)["opted_out"] is True


def test_a_template_is_not_sent_to_a_player_who_opted_out_of_marketing(r: redis.Redis) -> None:
    api = FakeWhatsApp().start()
    try:
        sender = WhatsAppSender(phone_number_id="106540352242922", access_token="tok", base_url=api.base_url,
                                window=ServiceWindow(86_400.0, Template("game_update")))
        h = harness(r, channel=sender)
        h.client.send_event(CID, "A new clue is out", message_id="e1", respond=True)  # no message: outside the window
        h.store.set_opt_out(CID, "marketing", True)  # as Meta's user_preferences webhook records it
        before = held_back("template")
        h.run()
        assert api.received == [] and held_back("template") == before + 1
        [dead] = [decode_dead_letter(d) for d in h.store.dead_letters(CID)]
        assert dead.reason == "opted_out"
        h.store.set_opt_out(CID, "marketing", False)
        h.client.send_event(CID, "Another clue", message_id="e2", respond=True)
        h.run()
        assert [m["type"] for m in api.received] == ["template"]
    finally:
        api.stop()


def test_a_reply_queued_before_a_number_change_goes_to_the_new_number(r: redis.Redis) -> None:
    h = harness(r)
    h.client.send_message(CID, "hi", message_id="m1")
    h.store.move_identity("phone", CID, "447700900999")
    h.run()
    assert h.channel.sent == [("447700900999", "ack:hi", None)]


def test_parley_optout_and_optin_and_the_summary(r: redis.Redis, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    h = harness(r)
    h.client.send_message(CID, "hi", message_id="m1")
    h.run()
    monkeypatch.setattr("worker.cli.handoff._client", lambda: h.client)
    assert cli.main(["optout", CID]) == 0 and f"opted {CID} out" in capsys.readouterr().out
    assert summary(h.store, CID)["opted_out"] is True
    h.client.send_operator_message(CID, "Are you still playing?", message_id="op1")
    h.run()
    assert texts(h) == ["ack:hi"]
    assert cli.main(["optin", CID]) == 0 and f"opted {CID} in" in capsys.readouterr().out
    assert summary(h.store, CID)["opted_out"] is False
    h.client.send_operator_message(CID, "Are you still playing?", message_id="op2")
    h.run()
    assert texts(h) == ["ack:hi", "Are you still playing?"]


def test_a_voice_note_opts_them_in_and_stop_is_confirmed_while_paused(r: redis.Redis) -> None:
    h = harness(r)
    h.client.pause(CID)
    h.client.send_message(CID, "STOP", message_id="m1")
    h.run()
    assert texts(h) == [STOP_REPLY] and h.store.opted_out(CID)  # the player's STOP is answered whatever holds the turn
    h.client.resume(CID)
    h.client.send_notice(CID, "Sorry, I can't listen to voice notes.", message_id="v1")  # what a voice note becomes
    h.run()
    assert texts(h)[-1] == "Sorry, I can't listen to voice notes." and not h.store.opted_out(CID)
