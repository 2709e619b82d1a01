"""The drain's answers to model failures that are neither an outage nor the player's fault: a prompt longer than
the context window (compact under the lease, retry the turn once) and a rejected API key (hold every conversation,
never dead-letter, log once a minute, raise an alarm metric). Also the cached prompt tokens in the trace and the
metrics."""

from __future__ import annotations

import logging

import msgpack
import pytest

from tests.configs import bare_config
from tests.support.store_kit import raw
from tests.worker.conftest import Harness, make_harness
from worker import KeepLastExchanges, ScriptedModel, Summarize, TokenBudget, metrics
from worker.conversation import ModelRequest, Usage
from worker.conversation.scripted import Reply
from worker.conversation.state import decode_state
from worker.envelopes.inputs import decode_dead_letter
from worker.errors import AuthenticationError, ContextLengthError, RateLimitedError
from worker.service import RetryLater
from worker.service.drain import recovery

CID = "447700900789"
TOO_LONG = "openai answered 400: This model's maximum context length is 128000 tokens"


def _count(counter, *labels: str) -> float:  # type: ignore[no-untyped-def]
    return float((counter.labels(*labels) if labels else counter)._value.get())


def _echo(req: ModelRequest) -> str:
    return f"ack:{req.messages[-1].content} ({len(req.messages)} msgs)"


def _talk(h: Harness, n: int) -> None:
    for i in range(n):
        h.client.send_message(CID, f"q{i}", message_id=f"pre{i}")
        h.run()


def _messages(h: Harness) -> int:
    return len(decode_state(h.store.read_state(CID).blob).messages)


def _retry_fires(h: Harness) -> None:
    raw(h.store).delete(h.store.keys(CID).hold)  # time passes: the scheduled retry fires
    h.woken.append(("drain", CID))


@pytest.mark.parametrize("compactor", [KeepLastExchanges(2), TokenBudget(1_000_000)],
                         ids=["the chain compacts", "the chain's trigger does not fire: halved"])
def test_a_context_length_error_compacts_and_retries_the_turn_once(compactor: object) -> None:
    model = ScriptedModel(default=_echo)
    h = make_harness(model, compactor=compactor)
    _talk(h, 8)
    before = _messages(h)
    recovered = _count(metrics.CONTEXT_OVERFLOWS, "recovered")
    model.push(ContextLengthError(TOO_LONG, provider="openai", status=400))
    h.client.send_message(CID, "long one", message_id="m1")
    h.run()
    assert not h.store.dead_letters(CID)
    assert h.channel.sent[-1][1].startswith("ack:long one")
    too_long, retried = model.requests[-2:]
    assert len(retried.messages) < len(too_long.messages)  # the retry saw the compacted history
    assert _messages(h) < before + 2  # and the compacted state was committed with the turn
    assert _count(metrics.CONTEXT_OVERFLOWS, "recovered") == recovered + 1
    h.client.send_message(CID, "next", message_id="m2")
    h.run()
    assert h.channel.sent[-1][1].startswith("ack:next")


def test_still_too_long_after_compaction_is_dead_lettered_with_the_reason_and_the_next_input_goes_on() -> None:
    model = ScriptedModel(default=_echo)
    h = make_harness(model, compactor=KeepLastExchanges(2))
    _talk(h, 6)
    dead = _count(metrics.CONTEXT_OVERFLOWS, "dead")
    model.push(ContextLengthError(TOO_LONG), ContextLengthError("prompt is too long: 210000 tokens > 200000"))
    h.client.send_message(CID, "huge", message_id="m1")
    h.client.send_message(CID, "small", message_id="m2")
    h.run()
    letters = [decode_dead_letter(d) for d in h.store.dead_letters(CID)]
    assert [(d.id, d.reason) for d in letters] == [("m1", "context_length")]
    assert "still too long after compaction" in letters[0].detail and "210000" in letters[0].detail
    assert h.channel.sent[-1][1].startswith("ack:small")
    assert _count(metrics.CONTEXT_OVERFLOWS, "dead") == dead + 1


def test_a_context_length_error_with_nothing_to_compact_is_dead_lettered() -> None:
    model = ScriptedModel([ContextLengthError(TOO_LONG)], default=_echo)
    h = make_harness(model, compactor=KeepLastExchanges(2))
    h.client.send_message(CID, "first and huge", message_id="m1")
    h.run()
    (letter,) = [decode_dead_letter(d) for d in h.store.dead_letters(CID)]
    assert letter.reason == "context_length" and "nothing left to compact" in letter.detail
    assert len(model.requests) == 1  # not retried: there was nothing to drop


def test_another_failure_of_the_retry_is_an_ordinary_retry_later() -> None:
    model = ScriptedModel(default=_echo)
    h = make_harness(model, compactor=KeepLastExchanges(2))
    _talk(h, 5)
    model.push(ContextLengthError(TOO_LONG), RateLimitedError("slow down", retry_after=3.0))
    h.client.send_message(CID, "m", message_id="m1")
    with pytest.raises(RetryLater):
        h.run()
    assert not h.store.dead_letters(CID)
    _retry_fires(h)
    h.run()
    assert h.channel.sent[-1][1].startswith("ack:m")


def test_a_rejected_key_holds_every_conversation_without_dead_letters_then_resumes(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(recovery, "AUTH_ALARM", recovery.AuthAlarm(every=60.0, clock=lambda: now[0]))
    rejected = [AuthenticationError("openai answered 401: Incorrect API key provided", provider="openai", status=401)
                for _ in range(40)]
    model = ScriptedModel(rejected, default=_echo)
    # Budgets far below the 40 refusals: neither the crash budget nor the outage budget may dead-letter them.
    h = make_harness(model, config=bare_config(max_attempts=2, max_model_retries=3, max_retry_delay=60.0))
    failures = _count(metrics.PROVIDER_AUTH_FAILURES)
    h.client.send_message(CID, "hello", message_id="m1")
    countdowns = []
    with caplog.at_level(logging.ERROR, logger="parley.service"):
        for i in range(40):
            with pytest.raises(RetryLater) as info:
                h.run()
            countdowns.append(info.value.countdown)
            assert _count(metrics.PROVIDER_AUTH_FAILING) == 1
            now[0] += 10.0 if i < 20 else 61.0  # a minute of refusals, then one a minute
            _retry_fires(h)
    assert not h.store.dead_letters(CID)
    assert _count(metrics.PROVIDER_AUTH_FAILURES) == failures + 40
    alarms = [r for r in caplog.records if "rejects the API key" in r.getMessage()]
    # Not one per turn: 4 for the first 20 refusals (10 s apart: at 0, 60, 120, 180 s), then one a minute.
    assert len(alarms) == 4 + 19
    assert "dead-lettered" in alarms[0].getMessage() and max(countdowns) <= 60.0
    h.run()  # the key is fixed
    assert [t for _, t, _ in h.channel.sent] == ["ack:hello (1 msgs)"]
    assert _count(metrics.PROVIDER_AUTH_FAILING) == 0


def test_the_auth_alarm_logs_once_a_minute_and_counts_what_it_kept_quiet() -> None:
    now = [0.0]
    alarm = recovery.AuthAlarm(every=60.0, clock=lambda: now[0])
    exc = AuthenticationError("bad key", provider="anthropic", status=403)
    logged = []
    for _ in range(100):
        logged.append(alarm.report(exc))
        now[0] += 1.5
    assert logged.count(True) == 3 and logged[0]  # at 0 s, 60 s, 120 s of 150 s


def test_cached_prompt_tokens_reach_the_trace_and_the_metrics() -> None:
    usage = Usage(prompt_tokens=3000, completion_tokens=20, cached_tokens=2048, cache_creation_tokens=512)
    h = make_harness(ScriptedModel([Reply("hi", usage=usage)]))
    cached, written = _count(metrics.TOKENS, "cached"), _count(metrics.TOKENS, "cache_write")
    h.client.send_message(CID, "hello", message_id="m1")
    h.run()
    entry = msgpack.unpackb(h.store.trace(CID)[-1], raw=False)
    assert (entry["prompt_tokens"], entry["completion_tokens"], entry["cached_tokens"],
            entry["cache_write_tokens"]) == (3000, 20, 2048, 512)
    assert _count(metrics.TOKENS, "cached") == cached + 2048
    assert _count(metrics.TOKENS, "cache_write") == written + 512


def test_the_summariser_tokens_of_a_context_length_compaction_count_with_the_turn() -> None:
    turn, summary = Usage(prompt_tokens=300, completion_tokens=20), Usage(prompt_tokens=400, completion_tokens=40)

    def answer(req: ModelRequest) -> Reply:
        if req.purpose == "summarize":
            return Reply("They talked.", usage=summary)
        return Reply(_echo(req), usage=turn)

    model = ScriptedModel(default=answer)
    h = make_harness(model, compactor=Summarize(model, keep_last=1, batch=1))
    for i in range(3):  # the follow-up compactions are set aside: only the one under the lease spends
        h.client.send_message(CID, f"q{i}", message_id=f"pre{i}")
        h.run(defer=("compact",))
    before = h.store.tokens_today(CID)
    model.push(ContextLengthError(TOO_LONG, provider="openai", status=400))
    h.client.send_message(CID, "long one", message_id="m1")
    h.run(defer=("compact",))
    assert h.channel.sent[-1][1].startswith("ack:long one")
    assert any(r.purpose == "summarize" for r in model.requests)  # compacted under the lease by the summariser
    # The retried turn's own tokens and the summariser's, in the day's budget as one turn's.
    assert h.store.tokens_today(CID) - before == 320 + 440
