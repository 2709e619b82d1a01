"""The worker's logic (service) with an in-memory Redis: order, effect once, poison, quarantine, delivery."""

from __future__ import annotations

import msgpack
import pytest

from tests.configs import bare_config
from tests.support.store_kit import StoreKit, raw
from tests.worker.conftest import make_harness
from worker import KeepLastExchanges, ScriptedModel, Summarize
from worker.conversation.state import decode_state
from worker.envelopes.inputs import Envelope, ReplyRecord, decode_dead_letter, decode_reply
from worker.errors import (
    DeliveryPermanentError,
    DeliveryRetryableError,
    EnvelopeError,
    InvalidConversationIdError,
    ModelRequestError,
    OversizeInputError,
    RateLimitedError,
)
from worker.service import RetryLater
from worker.service.deliver import deliverer as delivery
from worker.testing import RecordingChannel

CID = "447700900123"


def test_turns_and_events_apply_in_order_and_replies_are_delivered() -> None:
    h = make_harness()
    h.client.send_event(CID, "User has just tagged Harrogate Theatre")
    for i in range(5):
        h.client.send_message(CID, f"question {i}", message_id=f"wamid.{i}")
    h.run()
    assert [t for _, t, _ in h.channel.sent] == [f"ack:question {i}" for i in range(5)]
    st = decode_state(h.store.read_state(CID).blob)
    assert [m.role for m in st.messages][:2] == ["event", "user"]
    assert st.meta.turns == 5 and st.meta.events == 1
    first = h.model.requests[0]
    assert first.messages[0].role == "event" and first.system == "You are a test."
    assert [rid for rid, _ in h.store.delivered(CID)] == [f"wamid.{i}" for i in range(5)]


def test_resubmitted_message_ids_are_ignored() -> None:
    h = make_harness()
    for _ in range(3):
        h.client.send_message(CID, "hello", message_id="wamid.same")
    h.run()
    for _ in range(2):
        assert h.client.send_message(CID, "hello", message_id="wamid.same").duplicate
    h.run()
    assert len(h.channel.sent) == 1 and len(h.model.requests) == 1


def test_duplicate_celery_deliveries_apply_once() -> None:
    h = make_harness()
    h.client.send_message(CID, "hi", message_id="m1")
    h.woken.extend([("drain", CID)] * 5)  # Celery delivered the wake-up several times
    h.run()
    assert len(h.model.requests) == 1 and len(h.channel.sent) == 1


def test_system_prompt_per_turn() -> None:
    h = make_harness()
    h.client.send_message(CID, "hi", system="Score is 150.")
    h.run()
    assert h.model.requests[0].system == "Score is 150."


def test_bad_input_is_refused_at_the_producer() -> None:
    h = make_harness()
    with pytest.raises(InvalidConversationIdError):
        h.client.send_message("bad:id", "x")
    with pytest.raises(EnvelopeError):
        h.client.send_message(CID, "   ")
    with pytest.raises(OversizeInputError):
        h.client.send_message(CID, "x" * 20_000)
    assert h.store.inbox_depth(CID) == 0


def test_malformed_envelope_reaching_a_worker_is_dead_lettered_and_the_rest_proceeds() -> None:
    h = make_harness()
    h.store.accept(CID, b"\xc1not msgpack", "junk-1")
    h.woken.append(("drain", CID))  # what a producer that pushed it would have sent
    h.client.send_message(CID, "after junk", message_id="m2")
    h.run()
    dead = [decode_dead_letter(d) for d in h.store.dead_letters(CID)]
    assert [(d.id, d.reason) for d in dead] == [("junk-1", "malformed")]
    assert [t for _, t, _ in h.channel.sent] == ["ack:after junk"]


def test_model_errors_retry_then_dead_letter_and_the_conversation_continues() -> None:
    model = ScriptedModel([RateLimitedError("slow down", retry_after=3.0)] * 2 + ["recovered"] +
                          [ModelRequestError("bad request")] + ["next one"])
    h = make_harness(model, config=bare_config(max_attempts=5))
    h.client.send_message(CID, "one", message_id="m1")
    for _ in range(2):
        with pytest.raises(RetryLater) as info:
            h.run()
        assert info.value.countdown >= 3.0  # Retry-After is a floor; backoff with jitter may add to it
        assert StoreKit(h.store).held(CID)  # wake-ups until the retry is due return at once
        calls = len(model.requests)
        h.client.send_event(CID, f"meanwhile {len(model.requests)}")
        h.run()
        assert len(model.requests) == calls  # no extra retry chain was started by the new input's wake-up
        raw(h.store).delete(h.store.keys(CID).hold)  # time passes: the scheduled retry fires
        h.woken.append(("drain", CID))
    h.run()
    assert [t for _, t, _ in h.channel.sent] == ["recovered"]
    h.client.send_message(CID, "two", message_id="m2")
    h.client.send_message(CID, "three", message_id="m3")
    h.run()
    assert [t for _, t, _ in h.channel.sent] == ["recovered", "next one"]
    dead = [decode_dead_letter(d) for d in h.store.dead_letters(CID)]
    assert [(d.id, d.reason) for d in dead] == [("m2", "model_rejected")]


def test_poison_input_is_dead_lettered_after_k_attempts() -> None:
    h = make_harness(config=bare_config(max_attempts=3))
    h.client.send_message(CID, "poison", message_id="p1")
    h.client.send_message(CID, "fine", message_id="m2")
    kit = StoreKit(h.store)
    lease = kit.acquire(CID, 10)
    assert lease
    # Three workers died while applying p1 (the attempt counter rises before the model is called).
    for _ in range(3):
        kit.note_attempt(CID, lease.token, "p1")
    h.store.release(CID, lease.token)
    h.run()
    dead = [decode_dead_letter(d) for d in h.store.dead_letters(CID)]
    assert [(d.id, d.reason) for d in dead] == [("p1", "too_many_attempts")]
    assert [t for _, t, _ in h.channel.sent] == ["ack:fine"]


def test_corrupt_state_is_quarantined_and_the_turn_continues() -> None:
    h = make_harness()
    StoreKit(h.store).put_state(CID, expected_version=0, new_state=b"PLY\x01\x00garbage")
    h.client.send_message(CID, "hello", message_id="m1")
    h.run()
    assert [t for _, t, _ in h.channel.sent] == ["ack:hello"]
    q = [msgpack.unpackb(x) for x in h.store.quarantined(CID)]
    assert q[0]["blob"] == b"PLY\x01\x00garbage" and q[0]["reason"].startswith("corrupt")


def test_reset_goes_through_the_mailbox_in_order() -> None:
    h = make_harness()
    h.client.send_message(CID, "before", message_id="m1")
    h.client.reset(CID)
    h.client.send_message(CID, "after", message_id="m2")
    h.run()
    assert [m.content for m in h.model.requests[-1].messages] == ["after"]


def test_long_replies_are_split_into_whole_ordered_messages() -> None:
    para = ("This sentence is part of a long clue. " * 40).strip()
    text = "\n\n".join(f"Part {i}: {para}" for i in range(8))
    h = make_harness(ScriptedModel([text]))
    h.client.send_message(CID, "tell me everything", message_id="wamid.in", reply_to="wamid.in")
    h.run()
    parts = [t for _, t, _ in h.channel.sent]
    assert len(parts) > 1 and all(len(p) <= 4096 for p in parts)
    assert " ".join(parts).replace("\n\n", " ") .split() == text.replace("\n\n", " ").split()
    assert h.channel.sent[0][2] == "wamid.in" and all(r is None for _, _, r in h.channel.sent[1:])


class FlakyChannel(RecordingChannel):
    def __init__(self, failures: list[Exception]) -> None:
        super().__init__()
        self.failures = failures

    def send_text(self, recipient: str, text: str, *, reply_to: str | None = None,
                  callback_data: str | None = None) -> str:
        if self.failures:
            raise self.failures.pop(0)
        return super().send_text(recipient, text, reply_to=reply_to)


def test_throttled_delivery_retries_and_permanent_failure_is_dead_lettered() -> None:
    ch = FlakyChannel([DeliveryRetryableError("throttled", code=130429, retry_after=2.0)])
    h = make_harness(channel=ch)
    h.client.send_message(CID, "one", message_id="m1")
    # The drain delivers inline; throttled, it schedules a deliver task after the Retry-After.
    assert h.run(defer=("deliver",)) == [("deliver", CID)]
    assert h.scheduled[-1] == ("deliver", CID, 2.0) and ch.sent == []
    ch.failures.append(DeliveryRetryableError("throttled", code=130429, retry_after=3.0))
    with pytest.raises(RetryLater) as info:  # the deliver task itself raises, and Celery retries it
        h.service.deliver(CID)
    assert info.value.countdown == 3.0
    h.woken.append(("deliver", CID))
    h.run()
    assert [t for _, t, _ in ch.sent] == ["ack:one"]
    ch.failures.append(DeliveryPermanentError("outside the 24h window", code=131047))
    h.client.send_message(CID, "two", message_id="m2")
    h.client.send_message(CID, "three", message_id="m3")
    h.run()
    assert [t for _, t, _ in ch.sent] == ["ack:one", "ack:three"]
    dead = [decode_dead_letter(d) for d in h.store.dead_letters(CID)]
    assert dead[0].what == "reply" and dead[0].id == "m2" and "131047" in dead[0].reason


def test_crash_in_the_send_window_is_counted_and_resent() -> None:
    from worker import metrics

    h = make_harness(config=bare_config(deliver_inline=False))
    h.client.send_message(CID, "one", message_id="m1")
    h.service.drain(CID)
    assert h.channel.sent == [] and h.woken[-1] == ("deliver", CID)
    token, head = h.store.begin_delivery(CID, 10)  # claims part 0: marked in flight...
    assert token and head is not None and head.part == 0  # ...and the process dies after the HTTP call
    before = metrics.DUPLICATE_WINDOW._value.get()
    import time
    time.sleep(0.02)
    h.service.deliver(CID)
    assert metrics.DUPLICATE_WINDOW._value.get() == before + 1
    assert [t for _, t, _ in h.channel.sent] == ["ack:one"]


def test_follow_up_compaction_is_spliced_and_keeps_inputs_that_arrived_meanwhile() -> None:
    summarizer = ScriptedModel(default="summary of the early game")
    h = make_harness(compactor=Summarize(summarizer, keep_last=2, batch=2))
    for i in range(5):
        h.client.send_message(CID, f"q{i}", message_id=f"m{i}")
    deferred = h.run(defer=("compact",))
    assert ("compact", CID) in deferred  # the trigger fired after a commit; the reply did not wait for it
    assert len(h.channel.sent) == 5
    # The compaction runs while two more inputs are waiting.
    h.client.send_message(CID, "q5", message_id="m5")
    h.client.send_event(CID, "tagged Bettys")
    assert h.service.queue_compaction(CID)
    h.run()
    st = decode_state(h.store.read_state(CID).blob)
    assert st.summary == "summary of the early game"
    assert [m.content for m in st.messages if m.role in ("user", "event")][-2:] == ["q5", "tagged Bettys"]
    trace = [msgpack.unpackb(t) for t in h.store.trace(CID, 100)]
    assert any(t.get("splice") for t in trace)


def test_failed_compaction_changes_nothing() -> None:
    from worker.errors import ModelUnavailableError

    summarizer = ScriptedModel(default=ModelUnavailableError("down"))
    h = make_harness(compactor=Summarize(summarizer, keep_last=1, batch=1))
    for i in range(4):
        h.client.send_message(CID, f"q{i}", message_id=f"m{i}")
    h.run()
    before = h.store.read_state(CID)
    assert h.service.queue_compaction(CID) is False
    h.run()
    after = h.store.read_state(CID)
    assert (after.blob, after.version) == (before.blob, before.version)
    assert not raw(h.store).exists(h.store.keys(CID).compacting)


def test_envelope_round_trip() -> None:
    env = Envelope(kind="message", conversation_id=CID, text="hi", reply_to="wamid.x")
    from worker.envelopes.inputs import decode_envelope

    assert decode_envelope(env.to_bytes()) == env
    with pytest.raises(EnvelopeError):
        decode_envelope(b"\x81\xa4kind\xa7message")
    _ = KeepLastExchanges


def test_the_drain_delivers_its_last_reply_inline_and_wakes_delivery_for_earlier_ones() -> None:
    h = make_harness()
    h.client.send_message(CID, "one", message_id="m1")
    h.woken.clear()
    h.service.drain(CID)
    assert [t for _, t, _ in h.channel.sent] == ["ack:one"] and h.woken == []  # no Celery hop for the reply
    assert h.store.outbox_depth(CID) == 0 and raw(h.store).exists(h.store.keys(CID).dlease) == 0
    for i in range(3):
        h.client.send_message(CID, f"burst {i}", message_id=f"b{i}")
    h.woken.clear()
    h.service.drain(CID)
    # Replies to earlier inputs of a burst are handed to deliver tasks (the next turn does not wait for them);
    # the last is delivered inline, together with any the deliver tasks have not reached yet, in order.
    assert h.woken == [("deliver", CID), ("deliver", CID)]
    assert [t for _, t, _ in h.channel.sent] == ["ack:one", "ack:burst 0", "ack:burst 1", "ack:burst 2"]
    h.run()
    assert len(h.channel.sent) == 4 and h.store.outbox_depth(CID) == 0


def test_the_commit_that_ends_the_drain_starts_the_inline_delivery(monkeypatch: pytest.MonkeyPatch) -> None:
    """No separate round trip to begin delivering a drain's last reply: the releasing commit claimed it."""
    h = make_harness()
    h.client.send_message(CID, "one", message_id="m1")

    def not_needed(*_: object, **__: object) -> None:
        raise AssertionError("begin_delivery called: the commit should have started the delivery")

    monkeypatch.setattr(h.store, "begin_delivery", not_needed)
    h.service.drain(CID)
    assert [t for _, t, _ in h.channel.sent] == ["ack:one"]
    assert h.store.outbox_depth(CID) == 0 and raw(h.store).exists(h.store.keys(CID).dlease) == 0
    assert h.store.delivered(CID)[0][0] == "m1"


def test_the_inline_delivery_sends_the_reply_it_committed_without_decoding_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The drain hands the reply it just wrote to the delivery with its record: the head that is those bytes is sent
    from it; a reply queued before it (its delivery left to a deliver task) is still read from the outbox, in order."""
    h = make_harness()
    decoded: list[bytes] = []

    def counting(data: bytes) -> ReplyRecord:
        decoded.append(data)
        return decode_reply(data)

    monkeypatch.setattr(delivery, "decode_reply", counting)
    h.client.send_message(CID, "one", message_id="m1")
    h.service.drain(CID)
    assert [t for _, t, _ in h.channel.sent] == ["ack:one"] and decoded == []
    h.client.send_message(CID, "two", message_id="m2")
    h.client.send_message(CID, "three", message_id="m3")
    h.woken.clear()
    h.service.drain(CID)  # m2's reply waits for a deliver task; the inline delivery sends it first
    assert [t for _, t, _ in h.channel.sent] == ["ack:one", "ack:two", "ack:three"]
    assert [decode_reply(d).reply_id for d in decoded] == ["m2"]
