"""A person takes a conversation over (pause, resume, operator messages), with the service on an in-memory Redis:
no model call and no reply while paused, the operator's words in order and in the state, the race with a turn in
progress, and what the model sees after resume."""

from __future__ import annotations

import threading
import time

import pytest

from tests.configs import bare_burst, bare_config
from tests.support.store_kit import raw
from tests.worker.conftest import make_harness
from worker import ScriptedModel
from worker.conversation.inspect import inspect_state
from worker.conversation.messages import OPERATOR
from worker.conversation.state import decode_state
from worker.conversation.tools import Tool
from worker.errors import InputError, InvalidMessageError
from worker.testing import check_history

CID = "447700900123"


def _texts(h) -> list[str]:  # type: ignore[no-untyped-def]
    return [t for _, t, _ in h.channel.sent]


def test_paused_messages_enter_the_state_with_no_model_call_and_no_reply() -> None:
    h = make_harness()
    h.client.send_message(CID, "hi", message_id="m0")
    h.run()
    assert _texts(h) == ["ack:hi"]
    h.client.pause(CID)
    h.client.send_message(CID, "where is the clue?", message_id="m1")
    h.client.send_event(CID, "User has just tagged Harrogate Theatre", message_id="e1")
    h.client.send_message(CID, "hello??", message_id="m2")
    h.run()
    assert len(h.model.requests) == 1 and _texts(h) == ["ack:hi"]  # no model call, no reply, no notice
    st = decode_state(h.store.read_state(CID).blob)
    assert [(m.role, m.content) for m in st.messages][-3:] == [
        ("user", "where is the clue?"), ("event", "User has just tagged Harrogate Theatre"), ("user", "hello??")]
    assert h.store.inbox_depth(CID) == 0 and not h.store.dead_letters(CID)


def test_operator_messages_go_out_in_order_once_and_enter_the_state_as_a_persons() -> None:
    h = make_harness()
    h.client.pause(CID)
    h.client.send_message(CID, "help!", message_id="m1")
    h.client.send_operator_message(CID, "Hi, Sam here from the game team.", message_id="op1")
    h.client.send_operator_message(CID, "Try the theatre's side door.", message_id="op2",
                                   parts=[{"type": "text", "text": "It is open until 6."}])
    h.client.send_operator_message(CID, "Try the theatre's side door.", message_id="op2")  # resubmitted
    h.woken.extend([("drain", CID), ("deliver", CID)] * 3)  # wake-ups delivered several times
    h.run()
    assert _texts(h) == ["Hi, Sam here from the game team.", "Try the theatre's side door.", "It is open until 6."]
    assert not h.model.requests
    view = inspect_state(h.store.read_state(CID).blob)
    said = [(m["role"], m.get("content"), m.get("by")) for m in view["history"]]
    assert said == [("user", "help!", None), ("assistant", "Hi, Sam here from the game team.", OPERATOR),
                    ("assistant", "Try the theatre's side door.", OPERATOR),
                    ("assistant", "It is open until 6.", OPERATOR)]


def test_an_operator_message_ends_a_running_burst_hold_at_once() -> None:
    """A person's message never joins a player's burst, so it does not wait out the burst's quiet period (5 s here):
    its accept ends the hold and wakes a worker, which answers the burst and then sends the person's message, with no
    wait (no clock is advanced, nothing sleeps), as for a game event the model answers."""
    policy = bare_burst(quiet=5.0, max_wait=60.0)
    h = make_harness(config=bare_config(system_prompt="You are a test.", burst=policy))
    h.client.send_message(CID, "wait", message_id="m1")
    h.run()  # the drain defers the turn (the hold) and its wake-up at the end of the quiet period finds it held
    hold = h.store.keys(CID).hold
    assert _texts(h) == [] and raw(h.store).exists(hold)
    h.client.send_operator_message(CID, "Sam here from the game team.", message_id="op1")
    assert not raw(h.store).exists(hold) and h.woken == [("drain", CID)]  # ended, and a worker woken for it
    h.run()
    assert _texts(h) == ["ack:wait", "Sam here from the game team."]
    assert h.store.inbox_depth(CID) == 0


def test_after_resume_the_model_sees_what_was_said_meanwhile_and_answers_again() -> None:
    h = make_harness()
    h.client.send_message(CID, "hi", message_id="m0")
    h.run()
    h.client.pause(CID)
    h.client.send_message(CID, "I am stuck", message_id="m1")
    h.client.send_operator_message(CID, "Look behind the fountain.", message_id="op1")
    h.run()
    assert h.client.resume(CID) is True and h.client.resume(CID) is False
    h.client.send_message(CID, "found it!", message_id="m2")
    h.run()
    assert _texts(h) == ["ack:hi", "Look behind the fountain.", "ack:found it!"]
    request = h.model.requests[-1]
    seen = [(m.role, m.content) for m in request.messages]
    assert seen[-4:] == [("assistant", "ack:hi"), ("user", "I am stuck"), ("assistant", "Look behind the fountain."),
                         ("user", "found it!")]
    assert check_history(request.messages) == []


@pytest.mark.parametrize("first", ["new", "after a reset"])
def test_a_person_who_writes_first_is_read_by_the_model_later(first: str) -> None:
    """A person writes to a player before anyone else said a word (or first after a reset): the model's next
    request holds those words (a history may not start with an assistant message: it was dropped)."""
    h = make_harness()
    if first == "after a reset":
        h.client.send_message(CID, "hi", message_id="m0")
        h.client.reset(CID, message_id="r1")
    h.client.send_operator_message(CID, "Sam here: your team won the bonus round!", message_id="op1")
    h.client.send_message(CID, "thanks! what did we win?", message_id="m1")
    h.run()
    request = h.model.requests[-1]
    assert [m.content for m in request.messages][-2:] == [
        "Sam here: your team won the bonus round!", "thanks! what did we win?"]
    assert check_history(request.messages) == []


def test_operator_message_without_a_pause_goes_out_in_the_conversations_order() -> None:
    h = make_harness()
    h.client.send_message(CID, "one", message_id="m1")
    h.client.send_operator_message(CID, "a person says hello", message_id="op1")
    h.client.send_message(CID, "two", message_id="m2")
    h.run()
    assert _texts(h) == ["ack:one", "a person says hello", "ack:two"]


def test_a_timed_pause_ends_by_itself() -> None:
    h = make_harness()
    pause = h.client.pause(CID, seconds=0.2)
    assert pause.until is not None and pause.until > time.time()
    assert h.store.paused(CID) is not None and h.store.paused_count() == 1
    time.sleep(0.3)
    assert h.store.paused(CID) is None and h.store.paused_count() == 0
    h.client.send_message(CID, "back", message_id="m1")
    h.run()
    assert _texts(h) == ["ack:back"]


def test_a_reset_and_a_burst_during_a_pause() -> None:
    cfg = bare_config(system_prompt="You are a test.", burst=bare_burst(quiet=0.1, max_wait=5.0, max_messages=20))
    h = make_harness(config=cfg)
    h.client.send_message(CID, "old", message_id="m0")
    h.run()
    time.sleep(0.15)
    h.woken.append(("drain", CID))
    h.run()
    h.client.pause(CID)
    h.client.reset(CID, message_id="r1")
    for i in range(3):
        h.client.send_message(CID, f"burst {i}", message_id=f"b{i}")
    h.run()
    time.sleep(0.15)  # the burst's quiet period
    h.woken.append(("drain", CID))
    h.run()
    st = decode_state(h.store.read_state(CID).blob)
    assert [m.content for m in st.messages] == ["burst 0", "burst 1", "burst 2"]
    assert len(h.model.requests) == 1 and _texts(h) == ["ack:old"]
    trace = [t for t in h.store.trace(CID)]
    assert len(trace) == 3  # the first turn, the reset, one withheld burst


def test_a_pause_that_lands_while_the_model_answers_lets_that_answer_go_once() -> None:
    started, release = threading.Event(), threading.Event()

    def slow(req):  # type: ignore[no-untyped-def]
        started.set()
        assert release.wait(5)
        return "answer to " + req.messages[-1].content

    h = make_harness(ScriptedModel(default=slow))
    h.client.send_message(CID, "first", message_id="m1")
    h.client.send_message(CID, "second", message_id="m2")
    worker = threading.Thread(target=h.run)
    worker.start()
    assert started.wait(5)
    h.client.pause(CID)  # lands while the model answers "first"
    release.set()
    worker.join(10)
    h.woken.append(("deliver", CID))
    h.run()
    assert _texts(h) == ["answer to first"]  # answered once; "second" withheld, not lost
    st = decode_state(h.store.read_state(CID).blob)
    assert [(m.role, m.content) for m in st.messages] == [
        ("user", "first"), ("assistant", "answer to first"), ("user", "second")]
    assert len(h.model.requests) == 1


def test_a_double_text_sent_after_the_pause_is_not_merged_into_a_new_model_call() -> None:
    """PARLEY_DOUBLE_TEXT=merge: the pause lands while the model answers, then the player writes again. The answer
    already made goes out (its model call had started); the new message is withheld, not merged into a second model
    call that would answer it behind the person's back."""
    h = make_harness(config=bare_config(burst=bare_burst(quiet=0.0, merge=True, max_merges=2)))

    def answer(req):  # type: ignore[no-untyped-def]
        if len(h.model.requests) == 1:
            h.client.pause(CID)
            h.client.send_message(CID, "hello?? anyone", message_id="m2")
        return "answer to " + req.messages[-1].content

    h.model.default = answer
    h.client.send_message(CID, "where is the clue?", message_id="m1")
    h.run()
    assert len(h.model.requests) == 1 and _texts(h) == ["answer to where is the clue?"]
    st = decode_state(h.store.read_state(CID).blob)
    assert [(m.role, m.content) for m in st.messages] == [
        ("user", "where is the clue?"), ("assistant", "answer to where is the clue?"), ("user", "hello?? anyone")]
    assert h.store.inbox_depth(CID) == 0


def test_a_turn_that_had_called_tools_before_the_pause_finishes_on_its_retry() -> None:
    calls: list[str] = []
    tool = Tool(name="open_door", description="Open the door.", parameters={"type": "object", "properties": {}},
                handler=lambda: calls.append("open") or "opened")
    from worker.conversation.messages import Message, ToolCall
    from worker.conversation.model import ModelResponse

    crash = {"armed": True}

    def step1(req):  # type: ignore[no-untyped-def]
        return ModelResponse(Message(role="assistant", tool_calls=(ToolCall("c1", "open_door", "{}"),)),
                             finish_reason="tool_calls")

    def step2(req):  # type: ignore[no-untyped-def]
        if crash["armed"]:
            crash["armed"] = False
            raise SystemExit("worker killed")  # the crash after the tool ran and was recorded
        return "the door is open"

    h = make_harness(ScriptedModel([step1, step2], default=step2), tools=[tool])
    h.client.send_message(CID, "open it", message_id="m1")
    with pytest.raises(SystemExit):
        h.run()
    h.client.pause(CID)
    h.store._client.delete(h.store.keys(CID).lease)  # the dead worker's lease ran out
    h.woken.append(("drain", CID))
    h.run()
    assert calls == ["open"] and _texts(h) == ["the door is open"]


def test_delete_drops_the_pause_and_the_gauge_counts_across_conversations() -> None:
    h = make_harness()
    h.client.pause(CID)
    h.client.pause("447700900124", seconds=60)
    assert h.store.paused_count() == 2
    h.client.delete(CID)
    assert h.store.paused(CID) is None and h.store.paused_count() == 1
    h.client.resume("447700900124")
    assert h.store.paused_count() == 0


@pytest.mark.parametrize("parts, field", [
    ([{"type": "video", "link": "https://example.com/a.mp4"}], "parts.0.type"),
    ([{"type": "image", "link": "https://example.com/a.png", "media_id": "1"}], "parts.0"),
    ([{"type": "list", "text": "Where?", "button": "Places", "sections": [
        {"rows": [{"id": f"r{i}", "title": f"Place {i}"} for i in range(11)]}]}], "parts.0.sections.0.rows"),
    ([{"type": "text"}], "parts.0.text"),
    ([{"type": "text", "text": "ok", "caption": "x"}], "parts.0.caption"),
    ([{"type": "reaction", "emoji": "lol"}], "parts.0.emoji"),
    ([{"type": "reaction", "emoji": "👍👍👍"}], "parts.0.emoji"),
    ([{"type": "buttons", "text": "Go?", "buttons": [{"id": "yes ", "title": "Yes"}]}], "parts.0.buttons.0.id"),
    ([{"type": "image", "link": "http://example.com/a.png"}], "parts.0.link"),
    ("text", "parts"),
])
def test_unknown_or_malformed_parts_are_refused_naming_the_field_and_nothing_is_queued(parts, field) -> None:  # type: ignore[no-untyped-def]
    h = make_harness()
    with pytest.raises(InvalidMessageError) as err:
        h.client.send_operator_message(CID, "hello", parts=parts)
    assert err.value.field == field
    assert h.store.inbox_depth(CID) == 0


def test_an_empty_operator_message_is_refused_in_plain_words() -> None:
    h = make_harness()
    with pytest.raises(InputError, match=r"^an operator message needs non-empty text$") as err:
        h.client.send_operator_message(CID, " ")
    assert err.value.field == "text" and h.store.inbox_depth(CID) == 0


@pytest.mark.parametrize("seconds", [0, -1, float("inf"), float("nan"), True, "10", 8 * 86_400])
def test_bad_pause_seconds_are_refused_and_nothing_is_paused(seconds) -> None:  # type: ignore[no-untyped-def]
    h = make_harness()
    with pytest.raises(InvalidMessageError) as err:
        h.client.pause(CID, seconds=seconds)
    assert err.value.field == "seconds" and h.store.paused(CID) is None


def test_an_operator_message_outside_the_24_hour_window_is_the_template_or_a_dead_letter() -> None:
    from tests.support.fake_whatsapp import FakeWhatsApp
    from worker.channels.whatsapp import WhatsAppSender
    from worker.channels.window import ServiceWindow, Template
    from worker.envelopes.inputs import decode_dead_letter

    api = FakeWhatsApp().start()
    try:
        for template in (None, Template("game_update")):
            sender = WhatsAppSender(phone_number_id="106540352242922", access_token="tok", base_url=api.base_url,
                                    window=ServiceWindow(86_400.0, template))
            h = make_harness(channel=sender)
            h.client.send_message(CID, "hi", message_id="m1")
            h.run()
            raw(h.store).set(h.store.keys(CID).inbound, int((time.time() - 2 * 86_400) * 1000))  # two days ago
            before = len(api.received)
            h.client.pause(CID)
            h.client.send_operator_message(CID, "Are you still playing?", message_id="op1")
            h.run()
            sent = api.received[before:]
            if template is None:
                assert sent == []
                [dead] = [decode_dead_letter(d) for d in h.store.dead_letters(CID)]
                assert (dead.what, dead.id, dead.reason) == ("reply", "op1", "outside_window")
            else:
                [only] = sent
                assert only["type"] == "template" and only["template"]["name"] == "game_update"
                assert "Are you still playing?" in str(only["template"]["components"])
    finally:
        api.stop()


def test_no_short_notice_goes_out_while_paused() -> None:
    cfg = bare_config(system_prompt="You are a test.", daily_token_budget=1, token_budget_reply="Enough for today!")
    h = make_harness(config=cfg)
    h.client.send_message(CID, "hi", message_id="m0")  # spends the day's budget
    h.run()
    h.client.pause(CID)
    h.client.send_notice(CID, "I cannot read voice notes yet.", message_id="n1", reply_to="wamid.voice")
    h.client.send_message(CID, "over budget", message_id="m1")
    h.run()
    assert _texts(h) == ["ack:hi"]  # neither the unreadable message's notice nor the budget's
    assert h.store.inbox_depth(CID) == 0 and not h.store.dead_letters(CID)
    h.client.resume(CID)
    h.client.send_message(CID, "still over", message_id="m2")
    h.run()
    assert _texts(h) == ["ack:hi", "Enough for today!"]


def test_the_paused_gauge_is_read_from_redis_and_absent_when_redis_is_down() -> None:
    from worker.errors import StoreUnavailableError
    from worker.service.paused_gauge import PAUSED, PausedCollector

    h = make_harness()
    h.client.pause(CID)
    h.client.pause("447700900124", seconds=60)
    [family] = list(PausedCollector(h.store).collect())
    assert (family.name, [s.value for s in family.samples]) == (PAUSED, [2])

    class Down:
        def paused_count(self) -> int:
            raise StoreUnavailableError("redis is down")

    assert list(PausedCollector(Down()).collect()) == []  # type: ignore[arg-type]
    assert [f.name for f in PausedCollector(Down()).describe()] == [PAUSED]  # type: ignore[arg-type]


def test_a_responding_keyed_event_during_a_pause_calls_no_model_and_still_replaces_its_fact() -> None:
    h = make_harness()
    h.client.send_event(CID, "Your target is the Minster", message_id="f0", key="target")
    h.run()
    h.client.pause(CID)
    h.client.send_event(CID, "Your target is Harrogate Theatre", message_id="f1", key="target", respond=True)
    h.run()
    assert not h.model.requests and not _texts(h)  # withheld: no model call, no reply
    st = decode_state(h.store.read_state(CID).blob)
    assert {f.key: f.text for f in st.facts} == {"target": "Your target is Harrogate Theatre"}
    assert [(m.role, m.content, m.pinned) for m in st.messages][-1:] == [
        ("event", "Your target is Harrogate Theatre", False)]


def test_the_first_turn_of_a_drain_reads_the_pause_with_the_lease_and_later_ones_read_it_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The drain's begin reads the pause in its round trip, so a lone turn costs no GET of its own; a turn after it in
    the same drain (the commit's next input) reads the pause again, since a person may have taken over meanwhile."""
    h = make_harness()
    reads: list[str] = []
    real = h.store.paused
    monkeypatch.setattr(h.store, "paused", lambda cid: reads.append(cid) or real(cid))
    h.client.send_message(CID, "hi", message_id="m0")
    h.run()
    assert _texts(h) == ["ack:hi"] and reads == []
    h.client.send_message(CID, "one", message_id="m1")
    h.client.send_message(CID, "two", message_id="m2")
    h.woken.append(("drain", CID))
    h.run()
    assert _texts(h)[-2:] == ["ack:one", "ack:two"] and reads == [CID]  # the second turn point reads it


def test_a_pause_read_by_the_begin_withholds_the_first_turn_and_one_set_mid_drain_the_next() -> None:
    def answer(req) -> str:  # type: ignore[no-untyped-def]
        said = req.messages[-1].content
        if said == "one":
            h.client.pause(CID)  # a person takes over while the model answers "one"
        return "ack:" + said

    h = make_harness(ScriptedModel(default=answer))
    h.client.pause(CID)
    h.client.send_message(CID, "hi", message_id="m0")
    h.run()
    assert not h.model.requests and _texts(h) == []  # the begin saw the pause: withheld
    h.client.resume(CID)
    h.client.send_message(CID, "one", message_id="m1")
    h.client.send_message(CID, "two", message_id="m2")
    h.woken.append(("drain", CID))
    h.run()
    assert len(h.model.requests) == 1 and _texts(h) == ["ack:one"]  # "two" withheld: read at its own turn point
