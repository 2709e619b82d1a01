"""Bursts, double texts, notices and the dead-letter apology, through the service with an in-memory Redis."""

from __future__ import annotations

import time

import msgpack

from tests.configs import bare_burst, bare_config
from tests.support.store_kit import raw
from tests.worker.conftest import Harness, echo_all, make_harness
from worker import ScriptedModel
from worker.conversation.model import Attachment, ModelRequest
from worker.conversation.scripted import Reply
from worker.conversation.state import decode_state
from worker.conversation.tools import Tool
from worker.envelopes.inputs import Envelope, Media, decode_dead_letter
from worker.errors import MediaRejectedError, ModelRequestError
from worker.service import ServiceConfig
from worker.service.drain import Drainer
from worker.service.drain.media import DEFAULT_UNSUPPORTED_REPLY, MediaPreparer
from worker.service.drain.turn import UNLOADED_PHOTO
from worker.service.presence import Presence

CID = "447700900555"
QUIET = 0.3


def config(**burst: object) -> ServiceConfig:
    policy = bare_burst(**{"quiet": QUIET, "max_wait": 5.0, "max_messages": 20, **burst})  # type: ignore[arg-type]
    return bare_config(system_prompt="You are a test.", burst=policy, dead_letter_reply="Sorry, try again.")



def settle(h: Harness) -> None:
    """Let the quiet period pass and run the scheduled wake-up (the harness runs wake-ups at once; the hold
    makes the early run a no-op, as a countdown task arriving early would be)."""
    time.sleep(QUIET + 0.05)
    h.woken.append(("drain", CID))
    h.run()


def test_a_burst_is_answered_once_with_every_message_in_order() -> None:
    h = make_harness(ScriptedModel(default=echo_all), config=config())
    h.client.send_message(CID, "wait", message_id="wamid.1", reply_to="wamid.1")
    h.client.send_event(CID, "User has just tagged Harrogate Theatre", message_id="evt-1")
    h.client.send_message(CID, "which way", message_id="wamid.2", reply_to="wamid.2")
    h.client.send_message(CID, "the theatre?", message_id="wamid.3", reply_to="wamid.3")
    h.run()
    assert h.model.requests == [] and h.channel.sent == []  # still typing: put off, nothing answered
    assert any(kind == "drain" and 0 < countdown <= QUIET for kind, _, countdown in h.scheduled)
    settle(h)
    assert len(h.model.requests) == 1
    assert h.channel.sent == [(CID, "user:wait | event:User has just "
                                    "tagged Harrogate Theatre | user:which way | user:the theatre?", "wamid.3")]
    assert h.store.inbox_depth(CID) == 0
    st = decode_state(h.store.read_state(CID).blob)
    assert [m.role for m in st.messages] == ["user", "event", "user", "user", "assistant"]
    assert [rid for rid, _ in h.store.delivered(CID)] == ["wamid.1"]  # one reply, under the burst's first id
    trace = msgpack.unpackb(h.store.trace(CID)[-1])
    assert trace["burst"] == ["wamid.1", "evt-1", "wamid.2", "wamid.3"]


def test_with_coalescing_off_every_message_gets_its_own_turn() -> None:
    h = make_harness(ScriptedModel(default=echo_all), config=config(quiet=0.0))
    for i in range(3):
        h.client.send_message(CID, f"m{i}", message_id=f"wamid.{i}")
    h.run()
    assert [t for _, t, _ in h.channel.sent] == ["user:m0", "user:m1", "user:m2"]
    assert not any(countdown for _, _, countdown in h.scheduled)


def test_events_after_the_last_message_are_applied_after_the_reply() -> None:
    h = make_harness(ScriptedModel(default=echo_all), config=config())
    h.client.send_message(CID, "hi", message_id="wamid.1")
    h.client.send_event(CID, "later event", message_id="evt-1")
    h.run()
    assert h.channel.sent == []
    settle(h)
    st = decode_state(h.store.read_state(CID).blob)
    assert [m.role for m in st.messages] == ["user", "assistant", "event"]


def test_the_burst_goes_out_once_the_maximum_wait_has_passed() -> None:
    h = make_harness(ScriptedModel(default=echo_all), config=config(quiet=60.0, max_wait=5.0))
    old = Envelope(kind="message", conversation_id=CID, text="first", message_id="wamid.1",
                   accepted_at=time.time() - 10)
    h.store.accept(CID, old.to_bytes(), "wamid.1")
    h.client.send_message(CID, "still typing", message_id="wamid.2")
    h.woken.append(("drain", CID))
    h.run()
    assert [t for _, t, _ in h.channel.sent] == ["user:first | user:still typing"]


def test_a_clock_far_ahead_at_the_producer_does_not_hold_the_answer_back() -> None:
    h = make_harness(ScriptedModel(default=echo_all), config=config(quiet=60.0, max_wait=60.0))
    ahead = Envelope(kind="message", conversation_id=CID, text="from the future", message_id="wamid.1",
                     accepted_at=time.time() + 3600)
    h.store.accept(CID, ahead.to_bytes(), "wamid.1")
    h.woken.append(("drain", CID))
    h.run()
    assert [t for _, t, _ in h.channel.sent] == ["user:from the future"]


def test_a_reset_closes_the_burst_before_it() -> None:
    h = make_harness(ScriptedModel(default=echo_all), config=config(quiet=60.0))
    h.client.send_message(CID, "a", message_id="wamid.1")
    h.client.send_message(CID, "b", message_id="wamid.2")
    h.client.reset(CID)
    h.client.send_message(CID, "c", message_id="wamid.3")  # starts a new burst: still open, put off
    h.run()
    assert [t for _, t, _ in h.channel.sent] == ["user:a | user:b"]
    assert h.store.read_state(CID).blob in (None, b"")


def test_a_reset_phrase_inside_a_burst_starts_over_before_the_messages_after_it() -> None:
    """The player types "start over" then "hi" within the quiet period: one turn, on a fresh conversation, answering
    "hi" (the old history and what came before the phrase in the burst are gone). The last phrase counts."""
    model = ScriptedModel(default=echo_all)
    h = make_harness(model, config=config(), reset_phrases=("start over", "reset"))
    h.client.send_message(CID, "my secret plan", message_id="wamid.0")
    settle(h)
    h.client.send_message(CID, "blah", message_id="wamid.1")
    h.client.send_message(CID, "Start over!", message_id="wamid.2")
    h.client.send_event(CID, "User has just tagged the Pump Room", message_id="evt-1")
    h.client.send_message(CID, "reset", message_id="wamid.3")
    h.client.send_message(CID, "hi", message_id="wamid.4")
    h.run()
    settle(h)
    assert h.channel.sent[-1][1] == "user:hi"
    assert [m.content for m in model.requests[-1].messages] == ["hi"]  # the old history never reached the model
    st = decode_state(h.store.read_state(CID).blob)
    assert [(m.role, m.content) for m in st.messages] == [("user", "hi"), ("assistant", "user:hi")]
    trace = msgpack.unpackb(h.store.trace(CID)[-1])
    assert trace["reset"] == "phrase" and trace["burst"] == ["wamid.1", "wamid.2", "evt-1", "wamid.3", "wamid.4"]
    assert h.store.inbox_depth(CID) == 0


def test_a_burst_that_ends_on_a_reset_phrase_gets_the_reset_reply_without_a_model_call() -> None:
    model = ScriptedModel(default=echo_all)
    h = make_harness(model, config=config(), reset_phrases=("start over",), reset_reply="Fresh start!")
    h.client.send_message(CID, "my secret plan", message_id="wamid.0")
    settle(h)
    calls = len(model.requests)
    h.client.send_message(CID, "hmm", message_id="wamid.1")
    h.client.send_message(CID, "start over", message_id="wamid.2")
    h.run()
    settle(h)
    assert h.channel.sent[-1][1] == "Fresh start!" and len(model.requests) == calls
    assert not decode_state(h.store.read_state(CID).blob).messages


def test_a_burst_is_capped_at_max_messages() -> None:
    h = make_harness(ScriptedModel(default=echo_all), config=config(quiet=60.0, max_messages=2))
    for i in range(5):
        h.client.send_message(CID, f"m{i}", message_id=f"wamid.{i}")
    h.run()
    assert [t for _, t, _ in h.channel.sent] == ["user:m0 | user:m1", "user:m2 | user:m3"]  # m4 still open


def test_waiting_for_a_burst_never_counts_as_a_crashed_attempt() -> None:
    h = make_harness(ScriptedModel(default=echo_all), config=config(quiet=60.0, max_wait=60.0))
    h.client.send_message(CID, "hello", message_id="wamid.1")
    for _ in range(20):  # every wake-up of a long burst puts it off again
        raw(h.store).delete(h.store.keys(CID).hold)
        h.woken.append(("drain", CID))
        h.run()
    assert h.store.dead_letters(CID) == [] and h.channel.sent == []
    assert int(raw(h.store).hget(h.store.keys(CID).attempts, "wamid.1") or 0) <= 0


def test_a_retried_turn_takes_in_the_burst_its_crashed_run_recorded() -> None:
    h = make_harness(ScriptedModel(default=echo_all), config=config(quiet=60.0, max_messages=5))
    for i in range(3):
        old = Envelope(kind="message", conversation_id=CID, text=f"m{i}", message_id=f"wamid.{i}",
                       accepted_at=time.time() - 120)
        h.store.accept(CID, old.to_bytes(), f"wamid.{i}")
    begin = h.store.begin(CID, 10_000)  # a run that recorded a two-message burst, then died
    h.store.record_burst(CID, begin.token, "wamid.0", ["wamid.0", "wamid.1"])
    h.store.release(CID, begin.token)
    h.woken.append(("drain", CID))
    h.run()
    assert [t for _, t, _ in h.channel.sent] == ["user:m0 | user:m1", "user:m2"]


def test_merge_runs_the_turn_again_with_a_double_text() -> None:
    h = make_harness(config=config(quiet=0.0, merge=True, max_merges=2))

    def answer(req: ModelRequest) -> str:
        if len(h.model.requests) == 1:  # the player sends another message while the model thinks
            h.client.send_message(CID, "and the castle?", message_id="wamid.2")
        return echo_all(req)

    h.model.default = answer
    h.client.send_message(CID, "where is the theatre?", message_id="wamid.1")
    h.run()
    assert len(h.model.requests) == 2  # the stale answer was thrown away
    assert [t for _, t, _ in h.channel.sent] == ["user:where is the theatre? | user:and the castle?"]
    assert h.store.inbox_depth(CID) == 0
    assert msgpack.unpackb(h.store.trace(CID)[-1])["merges"] == 1


def test_queue_answers_a_double_text_in_order() -> None:
    h = make_harness(config=config(quiet=0.0))

    def answer(req: ModelRequest) -> str:
        if len(h.model.requests) == 1:
            h.client.send_message(CID, "and the castle?", message_id="wamid.2")
        return echo_all(req)

    h.model.default = answer
    h.client.send_message(CID, "where is the theatre?", message_id="wamid.1")
    h.run()
    assert [t for _, t, _ in h.channel.sent] == ["user:where is the theatre?", "user:and the castle?"]


def test_merge_is_bounded() -> None:
    h = make_harness(config=config(quiet=0.0, merge=True, max_merges=1))
    n = iter(range(2, 100))

    def answer(req: ModelRequest) -> str:
        if len(h.model.requests) <= 3:  # a player who never stops
            i = next(n)
            h.client.send_message(CID, f"m{i}", message_id=f"wamid.{i}")
        return echo_all(req)

    h.model.default = answer
    h.client.send_message(CID, "m1", message_id="wamid.1")
    h.run()
    first = h.channel.sent[0][1]
    assert first == "user:m1 | user:m2"  # one merge, then the answer went out
    assert h.store.inbox_depth(CID) == 0


def test_merge_never_throws_away_an_answer_whose_tools_ran() -> None:
    calls: list[str] = []
    give = Tool(name="give", description="Give an item.", parameters={"type": "object", "properties": {}},
                handler=lambda: calls.append("give") or "given")
    h = make_harness(config=config(quiet=0.0, merge=True), tools=[give])

    def after_tool(req: ModelRequest) -> str:
        h.client.send_message(CID, "thanks!", message_id="wamid.2")
        return "here you are"

    h.model.push(Reply(tool_calls=(("give", {}),)), after_tool)
    h.model.default = echo_all
    h.client.send_message(CID, "give me the sword", message_id="wamid.1")
    h.run()
    assert calls == ["give"]
    assert [t for _, t, _ in h.channel.sent] == ["here you are", "user:thanks!"]


def test_a_notice_is_sent_in_order_without_a_model_call() -> None:
    h = make_harness(ScriptedModel(default=echo_all), config=config(quiet=0.0))
    h.client.send_message(CID, "hi", message_id="wamid.1")
    h.client.send_notice(CID, "I can only read text.", message_id="wamid.2", reply_to="wamid.2")
    h.client.send_message(CID, "ok", message_id="wamid.3")
    h.run()
    assert h.channel.sent[1] == (CID, "I can only read text.", "wamid.2")
    assert len(h.model.requests) == 2
    st = decode_state(h.store.read_state(CID).blob)
    assert "I can only read text." not in [m.content for m in st.messages]


def test_a_photo_the_model_cannot_see_without_a_caption_gets_the_short_answer() -> None:
    h = make_harness(ScriptedModel(default=echo_all), config=config(quiet=60.0))
    h.client.send_message(CID, "", message_id="wamid.1", reply_to="wamid.1", media=Media(id="m-1"))
    h.run()
    assert h.channel.sent == [(CID, DEFAULT_UNSUPPORTED_REPLY, "wamid.1")]
    assert h.model.requests == []


def test_a_dead_lettered_message_gets_the_apology_and_stays_replayable() -> None:
    h = make_harness(ScriptedModel([ModelRequestError("bad request")], default=echo_all), config=config(quiet=0.0))
    h.client.send_message(CID, "hello", message_id="wamid.1", reply_to="wamid.1")
    h.client.send_event(CID, "an event", message_id="evt-1")
    h.run()
    assert h.channel.sent == [(CID, "Sorry, try again.", "wamid.1")]
    dead = [decode_dead_letter(d) for d in h.store.dead_letters(CID)]
    assert [d.id for d in dead] == ["wamid.1"] and dead[0].payload


def test_no_apology_for_a_dead_event_or_when_none_is_configured() -> None:
    h = make_harness(ScriptedModel([ModelRequestError("bad request")], default=echo_all),
                     config=bare_config(system_prompt="x"))
    h.client.send_message(CID, "hello", message_id="wamid.1")
    h.run()
    assert h.channel.sent == [] and len(h.store.dead_letters(CID)) == 1


def test_a_waiting_burst_is_marked_read_with_the_typing_indicator() -> None:
    h = make_harness(ScriptedModel(default=echo_all), config=config())
    presence = Presence(h.channel, enabled=True)
    h.service.presence = h.service.drainer.presence = presence
    h.client.send_message(CID, "wait", message_id="wamid.1")
    h.client.send_message(CID, "which way", message_id="wamid.2")
    h.run()
    assert presence.settle(CID)
    assert h.channel.read == [("wamid.2", True)]  # one post marks both read (WhatsApp marks the earlier ones)
    settle(h)
    assert presence.settle(CID)
    assert h.channel.read == [("wamid.2", True)]  # the turn right after did not post again
    assert len(h.channel.sent) == 1


class Pictures:
    """A fetcher with a picture per media id; ids missing from it are refused for good."""

    def __init__(self, **pictures: bytes) -> None:
        self.pictures, self.fetched = pictures, []  # type: ignore[var-annotated]

    def fetch(self, media_id: str, max_bytes: int | None = None) -> Attachment:
        self.fetched.append(media_id)
        if media_id not in self.pictures:
            raise MediaRejectedError("unknown media id", reason="refused", status=400)
        if max_bytes is not None and len(self.pictures[media_id]) > max_bytes:
            raise MediaRejectedError("over what the turn has left", reason="turn_budget")
        return Attachment("image/jpeg", self.pictures[media_id])


def seeing_harness(fetcher: Pictures, turn_max_bytes: int = 8 << 20, **burst: object) -> Harness:
    h = make_harness(ScriptedModel(default=echo_all, reads_images=True), config=config(**burst))
    media = MediaPreparer(fetcher, reads_images=True, unsupported_reply="text only", turn_max_bytes=turn_max_bytes)
    h.service.media = media
    h.service.drainer = Drainer(h.store, h.service.chat, h.service.wake, h.service.config, h.service.heartbeat,
                                deliverer=h.service.deliverer, media=media)
    return h


def test_a_bare_photo_and_the_question_after_it_are_one_turn_that_sees_the_picture() -> None:
    fetcher = Pictures(m1=b"\xff\xd8jpeg")
    h = seeing_harness(fetcher)
    h.client.send_message(CID, "", message_id="wamid.1", media=Media(id="m1", mime_type="image/jpeg"))
    h.client.send_message(CID, "what is this building?", message_id="wamid.2", reply_to="wamid.2")
    h.run()
    settle(h)
    assert len(h.model.requests) == 1
    req = h.model.requests[0]
    assert dict(req.attachments) == {"m1": Attachment("image/jpeg", b"\xff\xd8jpeg")}
    assert [(m.role, m.media.id if m.media else None) for m in req.messages[-2:]] == [("user", "m1"), ("user", None)]
    assert fetcher.fetched == ["m1"]
    st = decode_state(h.store.read_state(CID).blob)
    assert st.messages[0].media is not None and b"\xff\xd8jpeg" not in (h.store.read_state(CID).blob or b"")


def test_one_turn_holds_photos_up_to_its_byte_budget_and_the_model_reads_the_rest_were_not_loaded() -> None:
    fetcher = Pictures(**{f"m{i}": bytes([i]) * 1000 for i in range(5)})
    h = seeing_harness(fetcher, turn_max_bytes=2500)
    for i in range(5):
        h.client.send_message(CID, "", message_id=f"wamid.{i}", media=Media(id=f"m{i}", mime_type="image/jpeg"))
    h.client.send_message(CID, "which is the theatre?", message_id="wamid.9")
    h.run()
    settle(h)
    [req] = h.model.requests
    assert sorted(req.attachments) == ["m0", "m1"]  # 2,000 of the 2,500 bytes; the third would pass the budget
    photos = [m.content if m.media is None else m.media.id for m in req.messages[-6:-1]]
    assert photos == ["m0", "m1"] + [UNLOADED_PHOTO] * 3  # described, not dropped
    assert fetcher.fetched == [f"m{i}" for i in range(5)]  # each later one asked for no more than the 500 left


def test_a_photo_that_cannot_be_loaded_gets_the_short_answer_alone_or_a_placeholder_in_a_burst() -> None:
    h = seeing_harness(Pictures())
    h.client.send_message(CID, "", message_id="wamid.1", reply_to="wamid.1", media=Media(id="gone"))
    h.run()
    settle(h)
    assert h.channel.sent == [(CID, "text only", "wamid.1")] and h.model.requests == []
    h.client.send_message(CID, "", message_id="wamid.2", media=Media(id="gone"))
    h.client.send_message(CID, "see?", message_id="wamid.3")
    h.run()
    settle(h)
    assert h.channel.sent[-1][1] == "user:[The player sent a photo that could not be loaded] | user:see?"
