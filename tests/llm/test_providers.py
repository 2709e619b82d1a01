"""Providers against loopback servers speaking their wire protocols; every body validated."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.llm.servers import ScriptedServer, anthropic_blocks, error, openai_text, openai_tools
from tests.llm.validation import check_anthropic, check_openai
from worker import Chat, Tool
from worker.conversation import Message, ModelRequest, ToolCall, ToolSpec, Usage
from worker.conversation.messages import EVENT_MARK, FRAMING_NOTE
from worker.errors import (
    AuthenticationError,
    CircuitOpenError,
    ConfigurationError,
    ContextLengthError,
    ModelRequestError,
    ModelResponseError,
    ModelTimeoutError,
    ModelUnavailableError,
    RateLimitedError,
)
from worker.llm import build_model
from worker.llm.transport import RetryPolicy, shared_clients
from worker.testing import CreatedClients

TOOL = Tool(name="lookup", description="Look a place up", handler=lambda place="": {"place": place, "opened": 1900},
            parameters={"type": "object", "properties": {"place": {"type": "string"}}, "required": ["place"]})


class Sleeps:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def openai_model(server: ScriptedServer, **kw):  # type: ignore[no-untyped-def]
    sleeps = kw.pop("sleeps", Sleeps())
    retry = RetryPolicy(max_retries=kw.pop("max_retries", 2), sleep=sleeps)
    return build_model("openai", model="gpt-4o-mini", base_url=server.url + "/v1", api_key="sk-test", retry=retry,
                       breaker_threshold=kw.pop("breaker_threshold", 100), **kw)


def anthropic_model(server: ScriptedServer, **kw):  # type: ignore[no-untyped-def]
    retry = RetryPolicy(max_retries=kw.pop("max_retries", 2), sleep=kw.pop("sleeps", Sleeps()))
    return build_model("anthropic", model="claude-haiku-4-5", base_url=server.url, api_key="ak-test", retry=retry,
                       breaker_threshold=kw.pop("breaker_threshold", 100), **kw)


# --- OpenAI ----------------------------------------------------------------------------------------------

def test_openai_tool_loop_with_parallel_calls(server: ScriptedServer) -> None:
    server.push(openai_tools(("c1", "lookup", {"place": "Harrogate Theatre"}), ("c2", "lookup", {"place": "Bettys"})),
                openai_text("Both are in Harrogate.", usage=(50, 7, 32)))
    chat = Chat(model=openai_model(server), tools=[TOOL])
    state = chat.append_to_state(None, "User tagged Harrogate Theatre")
    result = chat.run_turn(state, system="You are a guide.", user="Tell me about both")
    assert result.reply == "Both are in Harrogate."
    assert result.usage == Usage(50, 7, 32)
    for body in server.requests:
        check_openai(body)
    second = server.requests[1]
    # The event in the system role, marked; the player's words in the user role.
    assert [m["role"] for m in second["messages"]] == ["system", "system", "user", "assistant", "tool", "tool"]
    assert second["messages"][1]["content"] == EVENT_MARK + "User tagged Harrogate Theatre"
    assert second["messages"][2]["content"] == "Tell me about both"
    assert second["tools"][0]["function"]["name"] == "lookup"
    assert server.headers[0]["authorization"] == "Bearer sk-test"
    assert server.paths[0] == "/v1/chat/completions"
    # The stored assistant message goes back verbatim on the next turn.
    server.push(openai_text("Again."))
    chat.run_turn(result.state, system="You are a guide.", user="again")
    assert server.requests[2]["messages"][3]["tool_calls"][0]["id"] == "c1"


def test_openai_unknown_response_fields_are_kept_and_output_only_ones_not_sent_back(server: ScriptedServer) -> None:
    server.push(openai_text("hi", annotations=[], future_field={"x": 1}, reasoning_content="thought"), openai_text("ok"))
    chat = Chat(model=openai_model(server))
    _, state = chat.chat_with_state(None, user="a")
    from worker.conversation.state import decode_state

    raw = decode_state(state).messages[1].raw
    assert raw is not None and raw["future_field"] == {"x": 1} and raw["reasoning_content"] == "thought"
    chat.chat_with_state(state, user="b")
    sent = server.requests[1]["messages"][1]
    assert sent["content"] == "hi" and "reasoning_content" not in sent and "annotations" not in sent


@pytest.mark.parametrize(("finish", "expected"), [("length", "length"), ("content_filter", "content_filter"),
                                                   ("stop", "stop"), ("weird", "other")])
def test_openai_finish_reasons(server: ScriptedServer, finish: str, expected: str) -> None:
    server.push(openai_text("x", finish=finish))
    r = openai_model(server).complete(ModelRequest(system=None, messages=[Message(role="user", content="q")]))
    assert r.finish_reason == expected


def test_openai_refusal(server: ScriptedServer) -> None:
    step = openai_text("")
    step[1]["choices"][0]["message"].update(content=None, refusal="I can't help with that.")
    server.push(step)
    r = openai_model(server).complete(ModelRequest(system=None, messages=[Message(role="user", content="q")]))
    assert r.finish_reason == "refusal" and r.message.content == "I can't help with that."


def test_openai_tool_choice_none_when_forced(server: ScriptedServer) -> None:
    server.push(openai_text("fine"))
    model = openai_model(server)
    req = ModelRequest(system="s", messages=[Message(role="user", content="q")],
                       tools=[ToolSpec("lookup", "d", {"type": "object"})], tool_choice="none")
    model.complete(req)
    assert server.requests[0]["tool_choice"] == "none"
    check_openai(server.requests[0])


# --- Anthropic ---------------------------------------------------------------------------------------------

def test_anthropic_tool_loop_alternation_and_thinking_blocks(server: ScriptedServer) -> None:
    thinking = {"type": "thinking", "thinking": "Let me look it up.", "signature": "sig-abc=="}
    server.push(
        anthropic_blocks(thinking, {"type": "text", "text": "Checking."},
                         {"type": "tool_use", "id": "tu_1", "name": "lookup", "input": {"place": "Harrogate Theatre"}},
                         stop="tool_use",
                         usage={"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100,
                                "cache_creation_input_tokens": 20}),
        anthropic_blocks({"type": "text", "text": "It opened in 1900."}),
    )
    chat = Chat(model=anthropic_model(server), tools=[TOOL])
    state = chat.append_to_state(None, "User tagged Harrogate Theatre")
    result = chat.run_turn(state, system="You are a guide.", user="When did it open?")
    assert result.reply == "It opened in 1900."
    for body in server.requests:
        check_anthropic(body)
    first, second = server.requests
    # The history holds an event: the system prompt says how events are framed.
    assert first["system"] == [{"type": "text", "text": f"You are a guide.\n\n{FRAMING_NOTE}",
                                "cache_control": {"type": "ephemeral"}}]
    assert first["max_tokens"] == 1024 and "thinking" not in first
    assert [m["role"] for m in first["messages"]] == ["user"]  # event and question merged at request time
    assert [b["text"] for b in first["messages"][0]["content"]] == [EVENT_MARK + "User tagged Harrogate Theatre",
                                                                     "When did it open?"]
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert second["messages"][1]["content"][0] == thinking  # returned unchanged, signature included
    assert second["messages"][2]["content"][0]["type"] == "tool_result"
    assert server.headers[0]["x-api-key"] == "ak-test" and server.headers[0]["anthropic-version"] == "2023-06-01"
    # The stored state keeps event and user separate (merging happened only on the wire).
    from worker.conversation.state import decode_state

    assert [m.role for m in decode_state(result.state).messages][:2] == ["event", "user"]


def test_anthropic_usage_and_stop_reasons(server: ScriptedServer) -> None:
    server.push(anthropic_blocks({"type": "text", "text": "cut"}, stop="max_tokens",
                                 usage={"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100,
                                        "cache_creation_input_tokens": 20}))
    r = anthropic_model(server).complete(ModelRequest(system=None, messages=[Message(role="user", content="q")]))
    assert r.finish_reason == "length"
    assert r.usage == Usage(prompt_tokens=130, completion_tokens=5, cached_tokens=100, cache_creation_tokens=20)


def test_anthropic_history_starting_with_assistant_gets_a_user_first(server: ScriptedServer) -> None:
    server.push(anthropic_blocks({"type": "text", "text": "ok"}))
    req = ModelRequest(system=None, messages=[Message(role="assistant", content="Welcome back!"),
                                              Message(role="user", content="hi")])
    anthropic_model(server).complete(req)
    check_anthropic(server.requests[0])


# --- semantic validity for random histories -------------------------------------------------------------------

@st.composite
def histories(draw):  # type: ignore[no-untyped-def]
    msgs: list[Message] = []
    n = draw(st.integers(1, 8))
    k = 0
    for _ in range(n):
        for _ in range(draw(st.integers(0, 2))):
            msgs.append(Message(role=draw(st.sampled_from(["event", "system"])), content=draw(st.text(min_size=1, max_size=8).filter(str.strip))))
        msgs.append(Message(role="user", content=draw(st.text(min_size=1, max_size=8).filter(str.strip))))
        for _ in range(draw(st.integers(0, 2))):
            calls = tuple(ToolCall(id=f"c{k}_{j}", name="lookup", arguments="{}") for j in range(draw(st.integers(1, 3))))
            k += 1
            msgs.append(Message(role="assistant", content=draw(st.sampled_from(["", "thinking"])), tool_calls=calls))
            msgs.extend(Message(role="tool", content="r", tool_call_id=c.id, name="lookup", is_error=draw(st.booleans()))
                        for c in calls)
        msgs.append(Message(role="assistant", content="answer"))
    if draw(st.booleans()):
        msgs = msgs[:-1]  # the history ends on the user side, as at request time
    return msgs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(histories(), st.booleans())
def test_random_histories_render_valid_bodies(history: list[Message], with_system: bool) -> None:
    from worker.llm.anthropic_messages import build_body as anthropic_body
    from worker.llm.openai_chat import build_body as openai_body

    req = ModelRequest(system="sys" if with_system else None, messages=history,
                       tools=[ToolSpec("lookup", "d", {"type": "object", "properties": {}})])
    check_openai(openai_body("gpt-4o-mini", req, max_tokens=100, temperature=None))
    check_anthropic(anthropic_body("claude-haiku-4-5", req, max_tokens=100, temperature=None))


# --- faults ----------------------------------------------------------------------------------------------

REQ = ModelRequest(system=None, messages=[Message(role="user", content="q")])


def test_429_retry_after_is_honoured_then_success(server: ScriptedServer) -> None:
    sleeps = Sleeps()
    server.push(error(429, "slow down", "rate_limit_exceeded", {"Retry-After": "1.5"}), openai_text("ok"))
    assert openai_model(server, sleeps=sleeps).complete(REQ).message.content == "ok"
    assert sleeps.calls == [1.5]


def test_5xx_then_success_with_backoff(server: ScriptedServer) -> None:
    sleeps = Sleeps()
    server.push(error(500, "boom"), error(503, "unavailable"), openai_text("ok"))
    assert openai_model(server, sleeps=sleeps).complete(REQ).message.content == "ok"
    assert len(sleeps.calls) == 2 and all(0 <= s <= 8 for s in sleeps.calls)


def test_retries_are_bounded(server: ScriptedServer) -> None:
    server.default = error(429, "slow down", "rate_limit_exceeded", {"Retry-After": "1"})
    with pytest.raises(RateLimitedError) as info:
        openai_model(server, max_retries=3).complete(REQ)
    assert len(server.requests) == 4 and info.value.retryable and info.value.retry_after == 1.0


def test_long_retry_after_is_not_slept_in_process(server: ScriptedServer) -> None:
    sleeps = Sleeps()
    server.push(error(429, "slow down", "rate_limit_exceeded", {"Retry-After": "120"}))
    with pytest.raises(RateLimitedError) as info:
        openai_model(server, sleeps=sleeps).complete(REQ)
    assert sleeps.calls == [] and info.value.retry_after == 120


@pytest.mark.parametrize(("status", "message", "kind", "exc"), [
    (400, "bad param", "invalid_request_error", ModelRequestError),
    (401, "bad key", "invalid_api_key", AuthenticationError),
    (403, "forbidden", "permission_error", AuthenticationError),
    (404, "no such model", "not_found_error", ModelRequestError),
    (400, "This model's maximum context length is 128000 tokens", "context_length_exceeded", ContextLengthError),
])
def test_permanent_errors_are_not_retried(server: ScriptedServer, status: int, message: str, kind: str, exc: type) -> None:
    server.default = error(status, message, kind)
    with pytest.raises(exc) as info:
        openai_model(server).complete(REQ)
    assert len(server.requests) == 1 and not info.value.retryable and message in str(info.value)
    assert info.value.status == status


def test_anthropic_overloaded_and_prompt_too_long(server: ScriptedServer) -> None:
    sleeps = Sleeps()
    server.push((529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, {}),
                anthropic_blocks({"type": "text", "text": "ok"}))
    assert anthropic_model(server, sleeps=sleeps).complete(REQ).message.content == "ok"
    server.push((400, {"type": "error", "error": {"type": "invalid_request_error",
                                                  "message": "prompt is too long: 210000 tokens > 200000 maximum"}}, {}))
    with pytest.raises(ContextLengthError):
        anthropic_model(server).complete(REQ)


def test_read_timeout(server: ScriptedServer) -> None:
    server.default = ("sleep", 2.0, openai_text("late"))
    started = time.monotonic()
    with pytest.raises(ModelTimeoutError):
        openai_model(server, timeout=0.3, max_retries=1).complete(REQ)
    assert time.monotonic() - started < 1.9


def test_connection_refused_is_unavailable() -> None:
    from tests.support.redis_server import free_port

    model = build_model("openai", model="m", base_url=f"http://127.0.0.1:{free_port()}/v1",
                        retry=RetryPolicy(max_retries=1, sleep=Sleeps()), connect_timeout=0.5)
    with pytest.raises(ModelUnavailableError):
        model.complete(REQ)


@pytest.mark.parametrize("step", [
    ("raw", 200, b'{"choices": [{"message": {"role": "assis'),
    ("raw", 200, b"not json at all"),
    (200, {"choices": []}, {}),
    (200, {"choices": [{"message": "nope"}]}, {}),
    (200, {"choices": [{"message": {"role": "assistant", "tool_calls": [{"id": "x"}]}}]}, {}),
    ("close",),
])
def test_malformed_responses_are_typed_errors(server: ScriptedServer, step: object) -> None:
    server.default = step
    with pytest.raises((ModelResponseError, ModelUnavailableError)):
        openai_model(server, max_retries=0).complete(REQ)


def test_anthropic_malformed(server: ScriptedServer) -> None:
    server.default = (200, {"content": "nope"}, {})
    with pytest.raises(ModelResponseError):
        anthropic_model(server, max_retries=0).complete(REQ)


def test_circuit_breaker_opens_and_half_opens(server: ScriptedServer) -> None:
    server.default = error(503, "down")
    model = openai_model(server, max_retries=0, breaker_threshold=3, breaker_reset=0.3)
    for _ in range(3):
        with pytest.raises(ModelUnavailableError):
            model.complete(REQ)
    calls = len(server.requests)
    with pytest.raises(CircuitOpenError):
        model.complete(REQ)
    assert len(server.requests) == calls  # failed fast, no call made
    time.sleep(0.35)
    server.default = openai_text("back")
    assert model.complete(REQ).message.content == "back"  # the probe went through and closed it
    assert model.complete(REQ).message.content == "back"


def test_every_model_of_an_endpoint_shares_one_client_pool(server: ScriptedServer) -> None:
    url = server.url + "/v1"
    assert shared_clients(url) is shared_clients(url)
    created = CreatedClients(shared_clients(url))
    server.default = openai_text("x")
    a, b = openai_model(server), openai_model(server)
    for _ in range(3):
        assert a.complete(REQ).message.content == b.complete(REQ).message.content == "x"
    assert created.count == 1  # sequential calls, whichever model makes them, reuse one client


def test_unknown_provider() -> None:
    with pytest.raises(ConfigurationError):
        build_model("cohere", model="x")


def test_summarisation_goes_through_the_provider(server: ScriptedServer) -> None:
    from worker import Summarize
    from worker.conversation.state import decode_state

    server.default = lambda body: openai_text("Summary: user asked things." if "running summary" in json.dumps(body)
                                              else "answer")
    model = openai_model(server)
    chat = Chat(model=model, compactor=Summarize(model, keep_last=1, batch=1))
    state = None
    for i in range(4):
        _, state = chat.chat_with_state(state, user=f"q{i}")
    assert decode_state(state).summary == "Summary: user asked things."
    for body in server.requests:
        check_openai(body)
