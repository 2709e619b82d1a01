"""The compactor chain from settings, the token counter, the room kept for the answer."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from worker import Compose, CompressToolExchanges, Hysteresis, KeepLastExchanges, ScriptedModel, Summarize, TokenBudget
from worker.conversation import Message, ModelRequest, Usage
from worker.conversation.scripted import Reply
from worker.conversation.tokens import (
    CalibratingModel,
    EstimateCounter,
    TiktokenCounter,
    UsageCalibratedCounter,
)
from worker.errors import ConfigurationError
from worker.runtime import build_chat
from worker.runtime.compaction_chain import (
    HIGH_WATER_SHARE,
    build_compactor,
    build_counter,
    compaction_budget,
    context_window,
)
from worker.settings import Settings


def Named(provider: str, name: str, **kw: object) -> ScriptedModel:
    """A scripted model under a provider's name and a model name (the policy chooses by them)."""
    return ScriptedModel(provider=provider, model_name=name, **kw)  # type: ignore[arg-type]


def _steps(c: object) -> list[type]:
    assert isinstance(c, Compose)
    return [type(s) for s in c.steps]


def test_unset_the_chain_compacts_in_large_steps_over_a_high_water_mark() -> None:
    s = Settings(_env_file=None)
    chain = build_compactor(s, Named("openai", "gpt-4o-mini"))
    assert isinstance(chain, Hysteresis) and chain.high_tokens == int(6000 * HIGH_WATER_SHARE) == 1080
    assert [type(step) for step in chain.steps] == [CompressToolExchanges, Summarize, TokenBudget]
    assert chain.steps[1].keep_last == 2 and chain.steps[2] == TokenBudget(6000, None)  # type: ignore[attr-defined]
    no_summary = build_compactor(Settings(_env_file=None, compaction_summarize=False), Named("openai", "gpt-4o-mini"))
    assert isinstance(no_summary, Hysteresis) and no_summary.high_tokens == 6000  # the budget's own trigger
    assert [type(step) for step in no_summary.steps] == [CompressToolExchanges, TokenBudget]


def test_the_high_water_mark_and_the_exchanges_kept_are_settings() -> None:
    s = Settings(_env_file=None, compaction_high_water=900, compaction_keep_last=4)
    chain = build_compactor(s, Named("openai", "gpt-4o-mini"))
    assert isinstance(chain, Hysteresis) and chain.high_tokens == 900
    assert chain.steps[1].keep_last == 4  # type: ignore[attr-defined]
    over = build_compactor(Settings(_env_file=None, compaction_high_water=90_000), Named("openai", "gpt-4o-mini"))
    assert isinstance(over, Hysteresis) and over.high_tokens == 6000  # never above the budget


def test_a_named_chain_is_composed_as_before_keeping_six_exchanges() -> None:
    s = Settings(_env_file=None, compaction=["tools", "summarize", "budget"])
    chain = build_compactor(s, Named("openai", "gpt-4o-mini"))
    assert _steps(chain) == [CompressToolExchanges, Summarize, TokenBudget]
    assert isinstance(chain, Compose) and chain.steps[2] == TokenBudget(6000, None)
    assert chain.steps[1].trigger_tokens == 4800 and chain.steps[1].keep_last == 6  # type: ignore[attr-defined]


def test_the_chain_is_read_from_the_environment_in_its_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_COMPACTION", " keep_last, Budget ,tools")
    monkeypatch.setenv("PARLEY_COMPACTION_KEEP_LAST", "3")
    s = Settings(_env_file=None)
    assert s.memory.compaction == ["keep_last", "budget", "tools"]
    chain = build_compactor(s, Named("anthropic", "claude-haiku-4-5"))
    assert _steps(chain) == [KeepLastExchanges, TokenBudget, CompressToolExchanges]
    assert chain.steps[0] == KeepLastExchanges(3)  # type: ignore[attr-defined]


def test_an_unknown_step_is_refused_naming_the_allowed_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_COMPACTION", "tools,forget")
    with pytest.raises(ValidationError, match="keep_last"):
        Settings(_env_file=None)


def test_keep_last_needs_at_least_one_exchange() -> None:
    with pytest.raises(ConfigurationError, match="KEEP_LAST"):
        build_compactor(Settings(_env_file=None, compaction=["keep_last"], compaction_keep_last=0),
                        Named("openai", "gpt-4o"))


def test_the_budget_leaves_the_answer_room_in_the_context_window() -> None:
    s = Settings(_env_file=None, context_window=4000, llm_max_tokens=1024)
    assert compaction_budget(s, "openai", "gpt-4o") == 4000 - 1024 - 200
    chain = build_compactor(s, Named("openai", "gpt-4o"))
    assert chain.steps[-1] == TokenBudget(2776, None)  # type: ignore[attr-defined]
    thinking = Settings(_env_file=None, context_window=8000, anthropic_thinking_budget=2048, compaction_max_tokens=9000)
    assert compaction_budget(thinking, "anthropic", "claude-sonnet-4-5") == 8000 - 1024 - 2048 - 400
    # A target above the lowered budget falls back to the default share of it, rather than being refused.
    low = Settings(_env_file=None, context_window=4000, compaction_target_tokens=5000)
    assert build_compactor(low, Named("openai", "gpt-4o")).steps[-1].target == int(2776 * 0.7)  # type: ignore[attr-defined]


def test_a_window_too_small_for_the_answer_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="PARLEY_CONTEXT_WINDOW"):
        compaction_budget(Settings(_env_file=None, context_window=1000, llm_max_tokens=1024), "openai", "x")


@pytest.mark.parametrize(("model", "window"), [
    ("gpt-4o-mini", 128_000), ("gpt-4.1-mini", 1_047_576), ("gpt-5", 400_000), ("o3-mini", 200_000),
    ("o1-mini", 128_000), ("gpt-4", 8_192), ("gpt-4-turbo", 128_000), ("claude-haiku-4-5", 200_000),
    ("SmolLM2-135M-Instruct", 4_096), ("llama3.1:8b", 8_192),
])
def test_context_windows_by_family(model: str, window: int) -> None:
    assert context_window(Settings(_env_file=None), model) == window
    assert context_window(Settings(_env_file=None, context_window=32_000), model) == 32_000


def test_the_counter_auto_is_tiktoken_for_openai_models_and_usage_for_the_others() -> None:
    s = Settings(_env_file=None)
    new = build_counter(s, "openai", "gpt-4o-mini")
    old = build_counter(s, "openai", "gpt-4-turbo")
    assert isinstance(new, TiktokenCounter) and new.encoding_name == "o200k_base"
    assert isinstance(old, TiktokenCounter) and old.encoding_name == "cl100k_base"
    assert isinstance(build_counter(s, "openai", "gpt-5-mini"), TiktokenCounter)
    assert isinstance(build_counter(s, "openai", "llama3.1:8b"), UsageCalibratedCounter)  # a compatible server
    assert isinstance(build_counter(s, "anthropic", "claude-haiku-4-5"), UsageCalibratedCounter)
    # Exactly the plain estimate (the calibrated counter is an EstimateCounter too).
    assert type(build_counter(Settings(_env_file=None, token_counter="estimate"), "openai", "gpt-4o")) is EstimateCounter
    forced = build_counter(Settings(_env_file=None, token_counter="tiktoken"), "anthropic", "claude-haiku-4-5")
    assert isinstance(forced, TiktokenCounter) and forced.encoding_name == "cl100k_base"
    # Exact: "Hello, world!" is 4 tokens in both encodings (tiktoken's own figure).
    assert new.count_text("Hello, world!") == 4 and old.count_text("Hello, world!") == 4


def test_the_usage_counter_follows_the_providers_reported_prompt_tokens() -> None:
    """A tokenizer that makes 2.5 characters a token: the calibrated counter converges on it, the chat's calls
    and the summariser's alike feeding it (build_chat wraps the model)."""

    def dense(req: ModelRequest) -> Reply:
        chars = len(req.system or "") + sum(len(m.content) for m in req.messages)
        return Reply("ok", usage=Usage(prompt_tokens=int(chars / 2.5) + 4 * (len(req.messages) + 1),
                                       completion_tokens=1))

    model = Named("anthropic", "claude-haiku-4-5", default=dense)
    chat = build_chat(Settings(_env_file=None), model)
    assert isinstance(chat.model, CalibratingModel) and chat.provider == "anthropic"
    counter = chat.counter
    assert isinstance(counter, UsageCalibratedCounter) and counter.chars_per_token == 4.0
    state = None
    for i in range(6):
        state = chat.run_turn(state, system="You are a guide. " * 20, user=f"Tell me about place number {i}.").state
    assert counter.samples == 6 and abs(counter.chars_per_token - 2.5) < 0.1
    assert counter.count_text("x" * 250) == 100


def test_the_usage_counter_ignores_tiny_prompts_and_bounds_odd_ones() -> None:
    c = UsageCalibratedCounter()
    c.calibrate(ModelRequest(system=None, messages=[Message(role="user", content="hi")]), Usage(prompt_tokens=9))
    assert c.samples == 0 and c.chars_per_token == 4.0
    c.calibrate(ModelRequest(system=None, messages=[Message(role="user", content="x" * 1000)]), Usage(prompt_tokens=5))
    assert c.chars_per_token == 12.0  # clamped


def test_the_model_options_flow_from_settings_to_the_wire() -> None:
    """PARLEY_ANTHROPIC_THINKING_BUDGET / PARLEY_ANTHROPIC_PROMPT_CACHE and the OpenAI family's token field,
    built by the runtime and seen by a loopback server speaking the providers' protocols."""
    from tests.llm.servers import ScriptedServer, anthropic_blocks, openai_text
    from tests.llm.validation import check_anthropic, check_openai
    from worker.runtime import build_model_from_settings

    server = ScriptedServer()
    try:
        server.default = anthropic_blocks({"type": "text", "text": "ok"})
        req = ModelRequest(system="Be brief.", messages=[Message(role="user", content="q")])
        s = Settings(_env_file=None, llm_provider="anthropic", anthropic_api_key="ak", anthropic_base_url=server.url,
                     anthropic_thinking_budget=1500, llm_max_tokens=400)
        build_model_from_settings(s).complete(req)
        body = server.requests[-1]
        check_anthropic(body)
        assert body["thinking"] == {"type": "enabled", "budget_tokens": 1500} and body["max_tokens"] == 1900
        assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
        off = s.model_copy(update={"llm": s.llm.model_copy(update={"anthropic_prompt_cache": False, "anthropic_thinking_budget": 0})})
        build_model_from_settings(off).complete(req)
        assert server.requests[-1]["system"] == "Be brief." and "thinking" not in server.requests[-1]
        server.default = openai_text("ok")
        gpt5 = Settings(_env_file=None, llm_provider="openai", llm_model="gpt-5-mini", openai_api_key="sk",
                        openai_base_url=server.url + "/v1")
        build_model_from_settings(gpt5).complete(req)
        check_openai(server.requests[-1])
        assert server.requests[-1]["max_completion_tokens"] == 1024 and "max_tokens" not in server.requests[-1]
    finally:
        server.stop()
