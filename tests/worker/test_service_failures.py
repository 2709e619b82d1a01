"""Failures the service must bound, surface and label: per-reply delivery limits, unreadable model answers,
unexpected errors in the compaction task and the inline delivery, dead inputs by kind."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tests.configs import bare_config
from tests.support.store_kit import StoreKit, raw
from tests.worker.conftest import Harness, make_harness
from tests.worker.test_service import FlakyChannel
from worker import ScriptedModel, Summarize, metrics
from worker.envelopes.inputs import decode_dead_letter
from worker.errors import DeliveryRetryableError, ModelResponseError, ModelUnavailableError, StoreError
from worker.service import RetryLater
from worker.store.redis_store import ConversationStore

CID = "447700900456"


def _count(counter, *labels: str) -> float:  # type: ignore[no-untyped-def]
    return float((counter.labels(*labels) if labels else counter)._value.get())


@pytest.fixture
def tasks_with(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """The Celery task functions, run in this process over a harness's service."""
    import tasks.conversation as tc

    def use(h: Harness) -> object:
        monkeypatch.setattr(tc, "_service", h.service)
        return tc

    yield use


def test_the_delivery_limit_counts_every_failed_send_of_a_reply_whoever_sends_it() -> None:
    """Inline delivery, the deliver task and a later turn's delivery all count against one budget per reply."""
    throttled = [DeliveryRetryableError("throttled", code=130429, retry_after=1.0) for _ in range(3)]
    ch = FlakyChannel(list(throttled))
    h = make_harness(channel=ch, config=bare_config(delivery_max_attempts=3))
    h.client.send_message(CID, "one", message_id="m1")
    assert h.run(defer=("deliver",)) == [("deliver", CID)]  # failure 1: the drain's inline delivery
    with pytest.raises(RetryLater):
        h.service.deliver(CID)  # failure 2: the deliver task (Celery would retry it)
    h.client.send_message(CID, "two", message_id="m2")
    h.woken.clear()
    h.service.drain(CID)  # failure 3: the next turn's inline delivery reaches m1 first, and gives it up
    dead = [decode_dead_letter(d) for d in h.store.dead_letters(CID)]
    assert [(d.what, d.id) for d in dead] == [("reply", "m1")] and "3 attempts" in dead[0].detail
    assert [t for _, t, _ in ch.sent] == ["ack:two"]  # the next reply is not held up
    assert h.store.outbox_depth(CID) == 0


def test_the_deliver_task_ignores_an_attempt_argument_from_older_messages(tasks_with) -> None:  # type: ignore[no-untyped-def]
    h = make_harness(config=bare_config(deliver_inline=False))
    tc = tasks_with(h)
    h.client.send_message(CID, "one", message_id="m1")
    h.service.drain(CID)
    assert tc.deliver(CID, 7) == 1  # a message queued by an earlier version, with its attempt count
    assert [t for _, t, _ in h.channel.sent] == ["ack:one"]


def _retried(h: Harness, times: int) -> None:
    """Run the drain ``times`` times, each scheduling a retry, then once more."""
    for _ in range(times):
        with pytest.raises(RetryLater):
            h.run()
        raw(h.store).delete(h.store.keys(CID).hold)  # time passes: the scheduled retry fires
        h.woken.append(("drain", CID))
    h.run()


def test_an_unreadable_model_answer_is_retried_a_few_times_then_dead_lettered() -> None:
    garbage = [ModelResponseError(f"no choices in the body ({i})") for i in range(3)]
    model = ScriptedModel([*garbage, ModelResponseError("still garbage")], default="answer to next")
    h = make_harness(model, config=bare_config(max_bad_response_retries=3))
    h.client.send_message(CID, "bad luck", message_id="m1")
    h.client.send_message(CID, "next", message_id="m2")
    _retried(h, 3)
    dead = [decode_dead_letter(d) for d in h.store.dead_letters(CID)]
    assert [(d.id, d.reason) for d in dead] == [("m1", "model_bad_response")]
    assert "still garbage" in dead[0].detail
    assert [t for _, t, _ in h.channel.sent] == ["answer to next"]  # the later input proceeds


def test_an_outage_does_not_use_up_the_budget_of_unreadable_answers() -> None:
    # Found by the chaos checker (llm-faults, scale 3): an input that waited out an outage (five retries) was
    # dead-lettered on the first truncated answer after it, the two kinds of retry being counted together.
    down = [ModelUnavailableError("provider down") for _ in range(5)]
    model = ScriptedModel([*down, ModelResponseError("truncated body")], default="answer")
    h = make_harness(model, config=bare_config(max_bad_response_retries=3))
    h.client.send_message(CID, "patience", message_id="m1")
    _retried(h, 6)
    assert h.store.dead_letters(CID) == []
    assert [t for _, t, _ in h.channel.sent] == ["answer"]


def test_a_malformed_input_and_a_poison_message_are_counted_by_their_kind() -> None:
    h = make_harness(config=bare_config(max_attempts=1))
    malformed, message = _count(metrics.INPUTS, "malformed", "dead"), _count(metrics.INPUTS, "message", "dead")
    h.store.accept(CID, b"\xc1not msgpack", "junk-1")
    h.client.send_message(CID, "poison", message_id="p1")
    kit = StoreKit(h.store)
    lease = kit.acquire(CID, 10)
    assert lease
    kit.note_attempt(CID, lease.token, "p1")  # a worker died applying p1 once already (after junk-1)
    h.store.release(CID, lease.token)
    h.woken.append(("drain", CID))
    h.run()
    dead = [decode_dead_letter(d) for d in h.store.dead_letters(CID)]
    assert [(d.id, d.reason) for d in dead] == [("junk-1", "malformed"), ("p1", "too_many_attempts")]
    assert _count(metrics.INPUTS, "malformed", "dead") == malformed + 1
    assert _count(metrics.INPUTS, "message", "dead") == message + 1


def _compactable(h: Harness) -> None:
    for i in range(4):
        h.client.send_message(CID, f"q{i}", message_id=f"m{i}")
    h.run(defer=("compact",))


def test_a_bug_in_the_compaction_task_is_logged_with_its_stack_and_counted(
        tasks_with, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    h = make_harness(compactor=Summarize(ScriptedModel(default="summary"), keep_last=1, batch=1))
    tc = tasks_with(h)
    _compactable(h)

    def bug(_: object) -> object:
        raise KeyError("a bug")

    monkeypatch.setattr(h.service.chat, "compact_with_report", bug)
    bugs = _count(metrics.UNEXPECTED_ERRORS, "compaction")
    with caplog.at_level(logging.ERROR, logger="parley.tasks"):
        assert tc.compact(CID) is False
    assert _count(metrics.UNEXPECTED_ERRORS, "compaction") == bugs + 1
    assert any(r.exc_info and isinstance(r.exc_info[1], KeyError) for r in caplog.records)
    assert not raw(h.store).exists(h.store.keys(CID).compacting)  # a later compaction may run


def test_an_expected_compaction_failure_is_a_counted_failure_not_a_bug(
        tasks_with, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    h = make_harness(compactor=Summarize(ScriptedModel(default="summary"), keep_last=1, batch=1))
    tc = tasks_with(h)
    _compactable(h)

    def refused(*_: object, **__: object) -> object:
        raise StoreError("Redis refused a command: OOM")

    monkeypatch.setattr(ConversationStore, "accept", refused)
    failed, bugs = _count(metrics.COMPACTIONS, "failed"), _count(metrics.UNEXPECTED_ERRORS, "compaction")
    assert tc.compact(CID) is False
    assert _count(metrics.COMPACTIONS, "failed") == failed + 1
    assert _count(metrics.UNEXPECTED_ERRORS, "compaction") == bugs


def test_a_bug_in_the_inline_delivery_is_logged_with_its_stack_counted_and_handed_on(
        caplog: pytest.LogCaptureFixture) -> None:
    ch = FlakyChannel([RuntimeError("a bug in a channel")])  # type: ignore[list-item]
    h = make_harness(channel=ch)
    h.client.send_message(CID, "one", message_id="m1")
    h.woken.clear()
    bugs = _count(metrics.UNEXPECTED_ERRORS, "inline_delivery")
    with caplog.at_level(logging.ERROR, logger="parley.service"):
        assert h.service.drain(CID) == 1  # the turn committed; the delivery is handed to a deliver task
    assert _count(metrics.UNEXPECTED_ERRORS, "inline_delivery") == bugs + 1
    assert any(r.exc_info and isinstance(r.exc_info[1], RuntimeError) for r in caplog.records)
    assert h.scheduled[-1] == ("deliver", CID, 1.0)
    h.run()
    assert [t for _, t, _ in ch.sent] == ["ack:one"]


def test_the_ping_task_records_through_the_store(tasks_with) -> None:  # type: ignore[no-untyped-def]
    h = make_harness()
    tc = tasks_with(h)
    tc.ping(f"{h.store.prefix}:ping", 12.5)
    [entry] = raw(h.store).lrange(f"{h.store.prefix}:ping", 0, -1)
    assert entry.startswith(b"12.5:")


def test_pinned_items_lost_to_the_cap_are_counted_when_the_state_is_committed() -> None:
    """The core reports ``pinned_dropped``; the worker counts it once the state that lost them is committed."""
    from worker import KeepLastExchanges

    h = make_harness(compactor=KeepLastExchanges(1), max_pinned=2)
    before = _count(metrics.PINNED_DROPPED)
    for i in range(4):
        h.client.send_event(CID, f"tagged landmark {i}", pinned=True)
        h.client.send_message(CID, f"q{i}", message_id=f"m{i}")
    h.run()
    h.service.queue_compaction(CID)
    h.run()
    # Four pinned events, a cap of two: the oldest beyond the cap go once their exchanges are compacted away.
    assert _count(metrics.PINNED_DROPPED) - before >= 1
