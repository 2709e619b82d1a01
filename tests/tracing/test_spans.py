"""The spans one input makes, in process (the service with an in-memory Redis and a scripted model), exported over
OTLP/HTTP to a loopback receiver that decodes them: one connected trace from the accept to each part's send, the
model and tool calls named and attributed as the GenAI semantic conventions say, message content only when opted
in, and a burst's turn linked to every message it answered."""

from __future__ import annotations

import json
import time

import pytest

from tests.configs import bare_burst, bare_config
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.support.store_kit import raw
from tests.worker.conftest import Harness, echo_all, make_harness
from worker import ScriptedModel
from worker.conversation.model import Usage
from worker.conversation.scripted import Reply
from worker.conversation.tools import Tool
from worker.errors import RateLimitedError
from worker.observability import tracing
from worker.observability.tracing.pseudonyms import PSEUDONYMS
from worker.service import RetryLater

CID = "447700900321"
SECRET_WORDS = "my address is 12 Secret Lane"


def _harness(**config: object) -> Harness:
    look = Tool("look", "Look around.", {"type": "object", "properties": {}}, lambda: "a quiet room")
    model = ScriptedModel([Reply(tool_calls=(("look", {}),), usage=Usage(40, 5, 32, 0)),
                           Reply(text="You see a quiet room.", usage=Usage(60, 7, 48, 0))],
                          provider="openai", model_name="gpt-4o-mini", default=echo_all)
    return make_harness(model, tools=[look], config=bare_config(system_prompt="You are a test.", **config))


def _exported(receiver: OtlpReceiver, names: set[str]) -> list[ReceivedSpan]:
    tracing.flush()
    assert receiver.wait_for(lambda: names <= {s.name for s in receiver.spans}, 10), [s.name for s in receiver.spans]
    return list(receiver.spans)


def _ancestors(span: ReceivedSpan, by_id: dict[str, ReceivedSpan]) -> list[str]:
    names = []
    while span.parent:
        span = by_id[span.parent]
        names.append(span.name)
    return names


def test_a_message_is_one_connected_trace_from_the_accept_to_the_send(traced: OtlpReceiver) -> None:
    h = _harness()
    h.client.send_message(CID, SECRET_WORDS, message_id="wamid.1")
    h.run()
    assert [t for _, t, _ in h.channel.sent] == ["You see a quiet room."]
    spans = _exported(traced, {"accept", "queue", "drain", "turn", "chat gpt-4o-mini", "execute_tool look", "commit",
                               "send"})
    [accept] = [s for s in spans if s.name == "accept"]
    assert accept.parent == "" and accept.service == "parley-test"  # a producer's call with no trace: the root
    assert {s.trace_id for s in spans} == {accept.trace_id}
    by_id = {s.span_id: s for s in spans}
    assert all(not s.parent or s.parent in by_id for s in spans)  # connected: every parent arrived
    chat = [s for s in spans if s.name == "chat gpt-4o-mini"]
    assert len(chat) == 2
    assert _ancestors(chat[0], by_id) == ["turn", "drain", "accept"]
    [tool] = [s for s in spans if s.name == "execute_tool look"]
    assert _ancestors(tool, by_id) == ["turn", "drain", "accept"]
    [commit] = [s for s in spans if s.name == "commit"]
    assert _ancestors(commit, by_id) == ["drain", "accept"]
    [send] = [s for s in spans if s.name == "send"]
    assert _ancestors(send, by_id) == ["drain", "accept"]  # the reply record carried the drain's context
    [queue] = [s for s in spans if s.name == "queue"]
    assert queue.parent == accept.span_id and queue.end_ns >= queue.start_ns

    first = chat[0].attributes
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.provider.name"] == first["gen_ai.system"] == "openai"
    assert first["gen_ai.request.model"] == "gpt-4o-mini"
    assert first["gen_ai.conversation.id"] == PSEUDONYMS.show(CID) != CID  # the player's number: a pseudonym
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"],
            first["gen_ai.usage.cache_read.input_tokens"]) == (40, 5, 32)
    assert first["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert chat[1].attributes["gen_ai.usage.cache_read.input_tokens"] == 48
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "look"
    assert tool.attributes["gen_ai.tool.call.id"].startswith("call_")
    assert tool.attributes["gen_ai.conversation.id"] == PSEUDONYMS.show(CID)
    # Content is off by default: the player's words appear on no span.
    assert not any(SECRET_WORDS in json.dumps(s.attributes) for s in spans)
    assert not any(k in s.attributes for s in spans for k in (
        "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"))


def test_message_content_is_captured_only_when_opted_in(traced: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    h = _harness()
    h.client.send_message(CID, SECRET_WORDS, message_id="wamid.1")
    h.run()
    spans = _exported(traced, {"chat gpt-4o-mini", "execute_tool look", "send"})
    chat = [s for s in spans if s.name == "chat gpt-4o-mini"]
    assert SECRET_WORDS in chat[0].attributes["gen_ai.input.messages"]
    assert json.loads(chat[1].attributes["gen_ai.output.messages"])[0]["parts"][0]["content"] == (
        "You see a quiet room.")
    [tool] = [s for s in spans if s.name == "execute_tool look"]
    assert tool.attributes["gen_ai.tool.call.result"] == "a quiet room"


def test_a_burst_turn_links_the_trace_of_every_message_it_answered(traced: OtlpReceiver) -> None:
    h = make_harness(ScriptedModel(default=echo_all), config=bare_config(
        system_prompt="You are a test.", burst=bare_burst(quiet=0.3, max_wait=5.0)))
    h.client.send_message(CID, "wait", message_id="wamid.1")
    h.client.send_message(CID, "which way?", message_id="wamid.2")
    h.run()
    time.sleep(0.35)
    h.woken.append(("drain", CID))
    h.run()
    assert len(h.channel.sent) == 1
    spans = _exported(traced, {"turn", "send"})
    accepts = {s.attributes["parley.input.id"]: s for s in spans if s.name == "accept"}
    assert accepts["wamid.1"].trace_id != accepts["wamid.2"].trace_id  # one trace per input
    [turn] = [s for s in spans if s.name == "turn"]
    assert turn.trace_id == accepts["wamid.1"].trace_id  # the head's trace
    assert turn.attributes["parley.turn.inputs"] == 2
    assert sorted(turn.links) == sorted((a.trace_id, a.span_id) for a in accepts.values())
    # The head was taken twice (put off while the player typed, then answered): two drain spans, one queue span.
    assert [s.attributes["parley.input.id"] for s in spans if s.name == "drain"] == ["wamid.1", "wamid.1"]
    assert [s.attributes["parley.input.id"] for s in spans if s.name == "queue"] == ["wamid.1"]


def test_a_model_failure_is_an_error_span_and_the_retry_continues_the_trace(traced: OtlpReceiver) -> None:
    h = make_harness(ScriptedModel([RateLimitedError("slow down"), "fine"], model_name="m1"),
                     config=bare_config(system_prompt="You are a test."))
    h.client.send_message(CID, "hi", message_id="wamid.1")
    with pytest.raises(RetryLater):
        h.run()
    raw(h.store).delete(h.store.keys(CID).hold)  # time passes: the scheduled retry fires
    h.woken.append(("drain", CID))
    h.run()
    assert [t for _, t, _ in h.channel.sent] == ["fine"]
    spans = _exported(traced, {"send"})
    chats = sorted((s for s in spans if s.name == "chat m1"), key=lambda s: s.start_ns)
    assert [c.error for c in chats] == [True, False]
    assert chats[0].attributes["error.type"] == "RateLimitedError"
    drains = [s for s in spans if s.name == "drain"]
    assert len(drains) == 2 and len({s.trace_id for s in spans}) == 1  # the retry: a new span in the same trace
    [queue] = [s for s in spans if s.name == "queue"]  # from the accept to the attempt that applied it
    first, retry = sorted(drains, key=lambda d: d.start_ns)
    assert first.end_ns <= queue.end_ns <= retry.start_ns + 1_000_000
