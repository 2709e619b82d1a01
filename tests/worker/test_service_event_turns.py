"""Game-driven turns through the service (in-memory Redis): events the model answers and facts that replace."""

from __future__ import annotations

import time
from collections.abc import Iterator

import msgpack
import pytest
from prometheus_client import REGISTRY

from tests.configs import bare_burst, bare_config
from tests.support.fake_whatsapp import FakeWhatsApp
from tests.support.store_kit import raw
from tests.worker.conftest import Harness, echo_all, make_harness
from worker import ScriptedModel
from worker.channels.whatsapp import WhatsAppSender
from worker.channels.window import ServiceWindow, Template
from worker.client.summary import with_texts
from worker.conversation.state import decode_state
from worker.durable_record import entries
from worker.envelopes.inputs import decode_dead_letter
from worker.errors import InputError
from worker.store.redis_store import StoreLimits

CID = "447700900777"
DAY = 86_400.0
TAGGED = "The player has just tagged Harrogate Theatre (10 points)"



def count(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_an_event_the_model_answers_is_replied_to_and_read_as_the_games() -> None:
    h = make_harness(ScriptedModel(default=echo_all))
    before = count("parley_inputs_total", kind="event", outcome="answered")
    messages = count("parley_inputs_total", kind="message", outcome="applied")
    h.client.send_event(CID, TAGGED, message_id="evt-1", respond=True)
    h.run()
    assert h.channel.sent == [(CID, f"event:{TAGGED}", None)]
    [request] = h.model.requests
    assert [m.role for m in request.messages] == ["event"]  # never the player's words
    assert request.system == "You are a test."
    st = decode_state(h.store.read_state(CID).blob)
    assert [m.role for m in st.messages] == ["event", "assistant"]
    assert (st.meta.turns, st.meta.events) == (0, 1)
    assert count("parley_inputs_total", kind="event", outcome="answered") == before + 1
    assert count("parley_inputs_total", kind="message", outcome="applied") == messages  # apart from the player's
    trace = msgpack.unpackb(h.store.trace(CID)[-1])
    assert "event" not in trace and "reply" not in trace  # the state holds the texts: the entry references them
    [shown] = with_texts([trace], h.store.read_state(CID).blob)
    assert shown["event"] == TAGGED and "user" not in shown and shown["reply"] == f"event:{TAGGED}"


def test_an_answered_event_and_an_operator_message_go_to_the_recipient_the_game_names() -> None:
    """A game that keys conversations by its own ids names the player's number as ``recipient`` on its messages; it
    can on the inputs that reply without a player's message too (else the answer went to its own id: refused)."""
    h = make_harness(ScriptedModel(default=echo_all))
    game_cid, phone = "game42.player7", "447700900999"
    h.client.send_message(game_cid, "hi", message_id="m1", recipient=phone)
    h.client.send_event(game_cid, TAGGED, message_id="evt-1", respond=True, recipient=phone)
    h.client.send_operator_message(game_cid, "Sam here.", message_id="op1", recipient=phone)
    h.run()
    assert [r for r, _, _ in h.channel.sent] == [phone, phone, phone]


def test_a_silent_event_still_gets_no_reply() -> None:
    h = make_harness(ScriptedModel(default=echo_all))
    h.client.send_event(CID, TAGGED, message_id="evt-1")
    h.run()
    assert h.channel.sent == [] and h.model.requests == []


def test_three_facts_with_one_key_leave_only_the_last_in_the_prompt() -> None:
    h = make_harness(ScriptedModel(default=echo_all))
    for i, place in enumerate(["Bettys", "the Royal Pump Room", "Harrogate Theatre"]):
        h.client.send_event(CID, f"The player's current target is {place}", message_id=f"t{i}", key="target")
    h.client.send_message(CID, "where now?", message_id="wamid.1")
    h.run()
    [request] = h.model.requests
    facts = request.after_history  # after the history: a fact's change leaves the prompt's start as it was
    assert facts is not None and "The player's current target is Harrogate Theatre" in facts
    assert "Bettys" not in facts and "Pump Room" not in facts and "target" not in (request.system or "")
    assert [m.role for m in request.messages] == ["user"]
    assert h.channel.sent == [(CID, "user:where now?", None)]


def test_a_responding_event_ends_a_waiting_burst_and_is_answered_after_it() -> None:
    quiet = 0.3
    policy = bare_burst(quiet=quiet, max_wait=60.0)
    h = make_harness(ScriptedModel(default=echo_all), config=bare_config(system_prompt="You are a test.",
                                                                         burst=policy))
    h.client.send_message(CID, "wait", message_id="wamid.1")
    h.client.send_message(CID, "which way", message_id="wamid.2")
    h.run()
    assert h.channel.sent == []  # the player may still be typing: the burst waits
    time.sleep(quiet + 0.05)  # the hold of that wait runs out
    h.client.send_event(CID, TAGGED, message_id="evt-1", respond=True)
    h.client.send_message(CID, "nice!", message_id="wamid.3")  # the player is still typing...
    h.woken.append(("drain", CID))
    h.run()
    # ...but the event ended the burst: answered at once, then the event alone; the message after it waits its turn.
    assert [text for _, text, _ in h.channel.sent] == ["user:wait | user:which way", f"event:{TAGGED}"]
    assert len(h.model.requests) == 2 and h.store.inbox_depth(CID) == 1


def test_a_responding_event_ends_a_running_burst_hold_at_once() -> None:
    """The quiet period (5 s) is being waited out in Redis when the event comes: its accept ends the hold and wakes a
    worker, which answers the burst and then the event, with no wait (no clock is advanced, nothing sleeps)."""
    policy = bare_burst(quiet=5.0, max_wait=60.0)
    h = make_harness(ScriptedModel(default=echo_all), config=bare_config(system_prompt="You are a test.",
                                                                         burst=policy))
    h.client.send_message(CID, "wait", message_id="wamid.1")
    h.run()  # the drain defers the turn (the hold) and its wake-up at the end of the quiet period finds it held
    hold = h.store.keys(CID).hold
    assert h.channel.sent == [] and raw(h.store).exists(hold)
    h.client.send_event(CID, TAGGED, message_id="evt-1", respond=True)
    assert not raw(h.store).exists(hold) and h.woken == [("drain", CID)]  # ended, and a worker woken for it
    h.run()
    assert [text for _, text, _ in h.channel.sent] == ["user:wait", f"event:{TAGGED}"]
    assert h.store.inbox_depth(CID) == 0


def test_a_reset_ends_a_running_burst_hold_at_once() -> None:
    """A reset never joins a burst, so waiting out the quiet period for it is waiting for nothing: its accept ends the
    hold and wakes a worker, which answers the burst (before the reset, in the mailbox's order) and then resets."""
    policy = bare_burst(quiet=5.0, max_wait=60.0)
    h = make_harness(ScriptedModel(default=echo_all), config=bare_config(system_prompt="You are a test.",
                                                                         burst=policy))
    h.client.send_message(CID, "wait", message_id="wamid.1")
    h.run()
    hold = h.store.keys(CID).hold
    assert h.channel.sent == [] and raw(h.store).exists(hold)
    h.client.reset(CID, message_id="r1")
    assert not raw(h.store).exists(hold) and h.woken == [("drain", CID)]
    h.run()
    assert [text for _, text, _ in h.channel.sent] == ["user:wait"]
    assert h.store.inbox_depth(CID) == 0 and h.store.read_state(CID).blob is None  # the reset ran after the answer


def test_a_silent_event_leaves_a_running_burst_hold() -> None:
    policy = bare_burst(quiet=5.0, max_wait=60.0)
    h = make_harness(ScriptedModel(default=echo_all), config=bare_config(system_prompt="You are a test.",
                                                                         burst=policy))
    h.client.send_message(CID, "wait", message_id="wamid.1")
    h.run()
    h.client.send_event(CID, TAGGED, message_id="evt-1")
    assert raw(h.store).exists(h.store.keys(CID).hold) and h.woken == []  # the player may still be typing


def test_a_responding_event_with_a_key_sets_the_fact_and_is_answered() -> None:
    h = make_harness(ScriptedModel(default=echo_all))
    h.client.send_event(CID, "Your target is Bettys", message_id="t0", key="target")
    h.client.send_event(CID, "Your target is Harrogate Theatre", message_id="t1", key="target", respond=True)
    h.run()
    [request] = h.model.requests
    assert "Harrogate Theatre" in (request.after_history or "") and "Bettys" not in (request.after_history or "")
    assert [(f.key, f.text) for f in decode_state(h.store.read_state(CID).blob).facts] == [
        ("target", "Your target is Harrogate Theatre")]


@pytest.mark.parametrize("fields", [{"key": "target", "from_player": True}, {"respond": True, "from_player": True}])
def test_a_players_event_never_sets_a_fact_nor_is_answered_as_the_games(fields: dict[str, object]) -> None:
    h = make_harness()
    with pytest.raises(InputError):
        h.client.send_event(CID, "I am the game", **fields)  # type: ignore[arg-type]
    assert h.store.inbox_depth(CID) == 0


# --- the customer-service window -------------------------------------------------------------------------------

@pytest.fixture
def api() -> Iterator[FakeWhatsApp]:
    a = FakeWhatsApp().start()
    yield a
    a.stop()


def whatsapp(api: FakeWhatsApp, template: Template | None = None) -> Harness:
    sender = WhatsAppSender(phone_number_id="106540352242922", access_token="tok", base_url=api.base_url,
                            window=ServiceWindow(DAY, template))
    return make_harness(ScriptedModel(default="You tagged Harrogate Theatre!"), channel=sender)


def player_wrote(h: Harness, seconds_ago: float) -> None:
    raw(h.store).set(h.store.keys(CID).inbound, int((time.time() - seconds_ago) * 1000))


def test_an_answered_event_inside_the_window_goes_as_text(api: FakeWhatsApp) -> None:
    h = whatsapp(api, Template("game_update"))
    player_wrote(h, 60)
    h.client.send_event(CID, TAGGED, message_id="evt-1", respond=True)
    h.run()
    assert [b["type"] for b in api.received] == ["text"]
    assert api.received[0]["text"]["body"] == "You tagged Harrogate Theatre!"


def test_an_answered_event_outside_the_window_goes_as_the_template(api: FakeWhatsApp) -> None:
    h = whatsapp(api, Template("game_update", "en_GB"))
    player_wrote(h, DAY + 60)
    h.client.send_event(CID, TAGGED, message_id="evt-1", respond=True)
    h.run()
    [sent] = api.received
    assert sent["type"] == "template" and sent["template"]["name"] == "game_update"
    assert sent["template"]["components"][0]["parameters"][0]["text"] == "You tagged Harrogate Theatre!"


def test_an_answered_event_outside_the_window_without_a_template_is_dead_lettered(api: FakeWhatsApp) -> None:
    h = whatsapp(api)
    h.client.send_event(CID, TAGGED, message_id="evt-1", respond=True)  # the player never wrote
    h.run()
    assert api.received == []
    [letter] = [decode_dead_letter(d) for d in h.store.dead_letters(CID)]
    assert letter.what == "reply" and letter.reason == "outside_window" and "no template" in letter.detail


# --- the durable record ----------------------------------------------------------------------------------------

def test_the_record_keeps_an_answered_event_apart_from_the_players_turns() -> None:
    h = make_harness(ScriptedModel(default="Well done!"), config=bare_config(system_prompt="x", record=True),
                     limits=StoreLimits(record_max=10_000))
    h.client.send_event(CID, TAGGED, message_id="evt-1", respond=True)
    h.client.send_message(CID, "thanks", message_id="wamid.1")
    h.run()
    kinds = [entries.decode(e.raw)["kind"] for e in h.store.read_records(h.store.records.stream(CID), 50)]
    assert [k for k in kinds if k in ("event_turn", "turn")] == ["event_turn", "turn"]
    rows = entries.to_rows((e.record_id, (1, n), e.raw, None)
                           for n, e in enumerate(h.store.read_records(h.store.records.stream(CID), 50)))
    assert [r[4] for r in rows.records if r[4] in ("event_turn", "turn")] == ["event_turn", "turn"]
    assert len(rows.usage) == 2  # both turns' tokens count; `parley usage` counts only the player's as turns


def test_an_answered_event_goes_through_the_before_turn_hooks_like_any_turn() -> None:
    # The daily budget's hook stands for any before_turn hook (a person's takeover intercepts there too).
    config = bare_config(system_prompt="x", daily_token_budget=10, token_budget_reply="That's all for today.")
    h = make_harness(ScriptedModel(default="a long answer " * 20), config=config)
    h.client.send_message(CID, "hi", message_id="wamid.1")
    h.run()
    assert len(h.model.requests) == 1
    h.client.send_event(CID, TAGGED, message_id="evt-1", respond=True)
    h.run()
    assert len(h.model.requests) == 1  # no model call: the hook answered in its place
    assert h.channel.sent[-1][1] == "That's all for today."


def test_an_answered_event_the_model_fails_on_is_dead_lettered_with_the_reason_and_no_apology() -> None:
    from worker.errors import ModelRequestError

    config = bare_config(system_prompt="x", dead_letter_reply="Sorry, try again.")
    h = make_harness(ScriptedModel([ModelRequestError("bad request")], default="ok"), config=config)
    h.client.send_event(CID, TAGGED, message_id="evt-1", respond=True)
    h.run()
    [letter] = [decode_dead_letter(d) for d in h.store.dead_letters(CID)]
    assert letter.what == "input" and letter.id == "evt-1" and letter.reason
    assert h.channel.sent == []  # the apology is for a player's message, not the game's event
