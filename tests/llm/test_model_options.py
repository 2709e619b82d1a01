"""Model options users pay attention to, against the loopback provider servers (every body validated against the
SDKs' request types): max_completion_tokens for OpenAI's reasoning models, Anthropic's prompt cache and extended
thinking, cached prompt tokens in the usage, and the errors the worker treats specially."""

from __future__ import annotations

import pytest

from tests.llm.servers import ScriptedServer, anthropic_blocks, error, openai_text
from tests.llm.test_providers import TOOL, anthropic_model, openai_model
from tests.llm.validation import check_anthropic, check_openai
from worker import Chat
from worker.conversation import Message, ModelRequest, Usage
from worker.conversation.messages import EVENT_MARK, FRAMING_NOTE
from worker.errors import AuthenticationError, ConfigurationError, ContextLengthError
from worker.llm import build_model
from worker.llm.local_model import _render_plain

REQ = ModelRequest(system="Be brief.", messages=[Message(role="user", content="q")], temperature=0.2)


@pytest.mark.parametrize(("model", "field"), [
    ("gpt-4o-mini", "max_tokens"), ("gpt-4.1", "max_tokens"), ("o3-mini", "max_completion_tokens"),
    ("o1", "max_completion_tokens"), ("o4-mini", "max_completion_tokens"), ("gpt-5", "max_completion_tokens"),
    ("gpt-5-mini", "max_completion_tokens"),
])
def test_openai_reasoning_models_get_max_completion_tokens_and_no_temperature(
        server: ScriptedServer, model: str, field: str) -> None:
    server.default = openai_text("ok")
    m = build_model("openai", model=model, base_url=server.url + "/v1", api_key="sk-test", max_tokens=300,
                    temperature=0.5)
    assert m.complete(REQ).message.content == "ok"
    body = server.requests[-1]
    check_openai(body)
    other = "max_tokens" if field == "max_completion_tokens" else "max_completion_tokens"
    assert body[field] == 300 and other not in body
    if field == "max_completion_tokens":
        assert "temperature" not in body  # these models accept only the default
    else:
        assert body["temperature"] == 0.2  # the request's own wins over the model's default


def test_openai_cached_prompt_tokens_are_in_the_usage(server: ScriptedServer) -> None:
    server.push(openai_text("ok", usage=(2000, 10, 1536)))
    r = openai_model(server).complete(REQ)
    assert r.usage == Usage(prompt_tokens=2000, completion_tokens=10, cached_tokens=1536)


def _history(turns: int) -> list[Message]:
    out: list[Message] = []
    for i in range(turns):
        out += [Message(role="user", content=f"question {i}"), Message(role="assistant", content=f"answer {i}")]
    return [*out, Message(role="user", content="newest")]


def test_anthropic_cache_breakpoints_sit_on_the_stable_prefix(server: ScriptedServer) -> None:
    server.default = anthropic_blocks({"type": "text", "text": "ok"})
    req = ModelRequest(system="You are a guide.\n\nSummary of the earlier conversation:\nOwls", messages=_history(3),
                       tools=[TOOL.spec])
    anthropic_model(server).complete(req)
    body = server.requests[-1]
    check_anthropic(body)
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    marked = [(i, b["text"]) for i, m in enumerate(body["messages"]) for b in m["content"] if "cache_control" in b]
    assert marked == [(4, "question 2"), (6, "newest")]  # the previous user turn and the newest message
    assert sum(1 for _ in marked) + 1 <= 4  # Anthropic allows four breakpoints


def test_anthropic_prompt_cache_off_sends_plain_bodies(server: ScriptedServer) -> None:
    server.default = anthropic_blocks({"type": "text", "text": "ok"})
    anthropic_model(server, prompt_cache=False).complete(ModelRequest(system="Hi.", messages=_history(2)))
    body = server.requests[-1]
    check_anthropic(body)
    assert body["system"] == "Hi." and "cache_control" not in str(body)


def test_anthropic_cache_reads_and_writes_are_in_the_usage(server: ScriptedServer) -> None:
    server.push(anthropic_blocks({"type": "text", "text": "ok"}, usage={
        "input_tokens": 50, "output_tokens": 7, "cache_read_input_tokens": 3000, "cache_creation_input_tokens": 400}))
    r = anthropic_model(server).complete(REQ)
    assert r.usage == Usage(prompt_tokens=3450, completion_tokens=7, cached_tokens=3000, cache_creation_tokens=400)


def test_anthropic_extended_thinking_round_trips_its_blocks_in_a_tool_loop(server: ScriptedServer) -> None:
    thinking = {"type": "thinking", "thinking": "Look it up first.", "signature": "EqQBCkYIARgCIkB=="}
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}
    server.push(
        anthropic_blocks(thinking, redacted,
                         {"type": "tool_use", "id": "tu_1", "name": "lookup", "input": {"place": "Harrogate"}},
                         stop="tool_use"),
        anthropic_blocks({"type": "thinking", "thinking": "Got it.", "signature": "sig2"},
                         {"type": "text", "text": "It opened in 1900."}),
    )
    chat = Chat(model=anthropic_model(server, thinking_budget=2048, temperature=0.7), tools=[TOOL], max_tokens=500)
    result = chat.run_turn(None, system="You are a guide.", user="When did it open?")
    assert result.reply == "It opened in 1900."
    first, second = server.requests
    for body in (first, second):
        check_anthropic(body)
        assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
        assert body["max_tokens"] == 500 + 2048 and "temperature" not in body
    assistant = second["messages"][1]
    assert assistant["content"][:2] == [thinking, redacted]  # unchanged: signatures and redacted data kept
    assert "cache_control" not in assistant["content"][0]


def test_anthropic_summaries_do_not_think(server: ScriptedServer) -> None:
    server.default = anthropic_blocks({"type": "text", "text": "summary"})
    req = ModelRequest(system="Summarise.", messages=[Message(role="user", content="x")], max_tokens=600,
                       purpose="summarize")
    anthropic_model(server, thinking_budget=1024).complete(req)
    assert "thinking" not in server.requests[-1] and server.requests[-1]["max_tokens"] == 600


def test_a_thinking_budget_below_the_minimum_is_a_configuration_error(server: ScriptedServer) -> None:
    with pytest.raises(ConfigurationError, match="at least 1024"):
        anthropic_model(server, thinking_budget=500)


@pytest.mark.parametrize("status", [401, 403])
def test_a_rejected_key_is_an_authentication_error_not_retried(server: ScriptedServer, status: int) -> None:
    server.default = error(status, "Incorrect API key provided", "invalid_api_key")
    with pytest.raises(AuthenticationError) as info:
        openai_model(server).complete(REQ)
    assert info.value.status == status and len(server.requests) == 1


def test_openai_context_length_code_alone_is_recognised(server: ScriptedServer) -> None:
    server.default = error(400, "Input too big for this model.", "context_length_exceeded")
    with pytest.raises(ContextLengthError):
        openai_model(server).complete(REQ)
    server.default = (400, {"type": "error", "error": {"type": "invalid_request_error",
                                                       "message": "prompt is too long: 210000 tokens > 200000"}}, {})
    with pytest.raises(ContextLengthError):
        anthropic_model(server).complete(REQ)


# --- what goes after the history (the game's keyed facts): last, outside the cached prefix -------------------------

AFTER = "Current facts (the game keeps these up to date):\n- The player's target is Harrogate Theatre"


def test_openai_sends_what_goes_after_the_history_last_in_the_system_role(server: ScriptedServer) -> None:
    server.default = openai_text("ok")
    req = ModelRequest(system="Be brief.", messages=_history(1), after_history=AFTER)
    openai_model(server).complete(req)
    body = server.requests[-1]
    check_openai(body)
    assert body["messages"][-1] == {"role": "system", "content": AFTER}
    assert body["messages"][-2] == {"role": "user", "content": "newest"}


def test_anthropic_sends_it_after_the_breakpoints_as_the_games_words(server: ScriptedServer) -> None:
    server.default = anthropic_blocks({"type": "text", "text": "ok"})
    req = ModelRequest(system="Be brief.", messages=_history(2), after_history=AFTER)
    anthropic_model(server).complete(req)
    body = server.requests[-1]
    check_anthropic(body)
    last = body["messages"][-1]["content"]
    assert last[-1] == {"type": "text", "text": f"{EVENT_MARK}{AFTER}"}  # no breakpoint: it changes between requests
    assert last[-2]["text"] == "newest" and last[-2]["cache_control"] == {"type": "ephemeral"}
    assert FRAMING_NOTE in body["system"][0]["text"]  # the model is told what the mark means


def test_the_local_model_reads_it_last_as_a_system_turn() -> None:
    req = ModelRequest(system="Be brief.", messages=_history(1), after_history=AFTER)
    assert _render_plain(req)[-1] == {"role": "system", "content": AFTER}


def test_anthropic_marks_the_end_of_the_callers_prompt_too_so_a_compaction_keeps_it_cached(
        server: ScriptedServer) -> None:
    server.default = anthropic_blocks({"type": "text", "text": "ok"})
    prompt = "You are a guide."
    req = ModelRequest(system=f"{prompt}\n\nSummary of the earlier conversation:\nOwls", messages=_history(3),
                       system_stable=len(prompt))
    anthropic_model(server).complete(req)
    body = server.requests[-1]
    check_anthropic(body)
    assert [b["text"] for b in body["system"]] == [prompt, "Summary of the earlier conversation:\nOwls"]
    assert all(b["cache_control"] == {"type": "ephemeral"} for b in body["system"])
    marked = sum(1 for m in body["messages"] for b in m["content"] if "cache_control" in b)
    assert marked + len(body["system"]) == 4  # Anthropic allows four breakpoints


def test_a_chat_request_says_where_the_callers_prompt_ends() -> None:
    from worker import Chat, ScriptedModel

    model = ScriptedModel()
    chat = Chat(model=model)
    state = chat.append_to_state(None, "The player joined team Owls", pinned=True)
    chat.chat_with_state(state, system="You are a guide.", user="hi")
    request = model.requests[0]
    assert request.system is not None and request.system[: request.system_stable] == "You are a guide."


def test_the_local_model_keeps_its_short_answer_bound_unless_one_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hosted models' default bound (1,024 tokens) let the 135M local model loop for a minute on the demo's first
    question; it keeps its own unless PARLEY_LLM_MAX_TOKENS is set."""
    from worker.llm.local_model import LocalModel
    from worker.runtime import build_model_from_settings
    from worker.settings import Settings

    monkeypatch.delenv("PARLEY_LLM_MAX_TOKENS", raising=False)
    default = build_model_from_settings(Settings(llm_provider="local"))
    assert isinstance(default, LocalModel) and default.max_tokens == LocalModel().max_tokens < 1024
    monkeypatch.setenv("PARLEY_LLM_MAX_TOKENS", "500")
    chosen = build_model_from_settings(Settings(llm_provider="local"))
    assert isinstance(chosen, LocalModel) and chosen.max_tokens == 500
