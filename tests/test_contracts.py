"""The names others build against ("Contracts others build against" in the design notes, ../shared/DESIGN.md,
outside this repository). A rename breaks users: it must break this test first."""

from __future__ import annotations

import inspect
import pathlib

import pytest

import worker
from worker import Chat, Compose, CompressToolExchanges, KeepLastExchanges, Summarize, TokenBudget, Tool
from worker.client import ConversationClient
from worker.llm import build_model


def params(fn: object) -> list[str]:
    return list(inspect.signature(fn).parameters)  # type: ignore[arg-type]


def test_library_contract() -> None:
    assert {"model", "compactor", "tools", "max_tool_iterations"} <= set(params(Chat))
    assert params(Chat.chat_with_state)[:2] == ["self", "state"]
    assert {"system", "user"} <= set(params(Chat.chat_with_state))
    assert {"system", "user"} <= set(params(Chat.chat))
    assert params(Chat.append_to_state)[:4] == ["self", "state", "text", "pinned"]
    assert params(Chat.compact)[:2] == ["self", "state"]
    assert {"name", "description", "parameters", "handler"} <= set(params(Tool))
    assert params(KeepLastExchanges)[:1] == ["n"]
    assert params(TokenBudget)[:2] == ["max_tokens", "target_tokens"]
    assert params(Summarize)[:1] == ["model"]
    CompressToolExchanges()
    Compose(KeepLastExchanges(2), TokenBudget(100))
    assert callable(worker.inspect_state)
    assert params(build_model)[:1] == ["provider"]
    assert {"model", "base_url", "api_key"} <= set(params(build_model))


def test_producer_contract() -> None:
    assert callable(ConversationClient.from_url) and callable(ConversationClient.from_env)
    assert params(ConversationClient.send_message)[:3] == ["self", "conversation_id", "text"]
    assert {"message_id", "reply_to", "system"} <= set(params(ConversationClient.send_message))
    assert params(ConversationClient.send_event)[:3] == ["self", "conversation_id", "text"]
    assert "message_id" in params(ConversationClient.send_event)
    assert params(ConversationClient.reset)[:2] == ["self", "conversation_id"]
    assert params(ConversationClient.delete)[:2] == ["self", "conversation_id"]


def test_celery_entry_point() -> None:
    import tasks

    assert tasks.app.main == "parley"
    import tasks.conversation  # registers the tasks

    names = set(tasks.app.tasks)
    assert {"parley.drain", "parley.deliver", "parley.compact", "parley.sweep"} <= names
    assert tasks.app.conf.accept_content == ["msgpack"]


# --- the public surface, pinned exactly: adding or removing a name is a decision, made here ---------------------

PUBLIC = {
    "Chat", "CompactionReport", "Compactor", "Compose", "CompressToolExchanges", "EstimateCounter", "Hysteresis",
    "KeepLastExchanges", "Message", "Model", "Reply", "ScriptedModel", "Summarize", "TiktokenCounter",
    "TokenBudget", "TokenCounter", "Tool", "TurnResult", "inspect_state",
}
DESIGN_LIBRARY_NAMES = {"Chat", "Tool", "KeepLastExchanges", "TokenBudget", "Summarize", "CompressToolExchanges",
                        "Compose", "inspect_state"}


def keyword_only(fn: object) -> set[str]:
    return {n for n, p in inspect.signature(fn).parameters.items()  # type: ignore[arg-type]
            if p.kind is inspect.Parameter.KEYWORD_ONLY}


def test_worker_all_is_pinned_and_importable() -> None:
    assert set(worker.__all__) == PUBLIC
    assert len(worker.__all__) == len(PUBLIC)
    assert DESIGN_LIBRARY_NAMES <= PUBLIC
    for name in worker.__all__:
        assert getattr(worker, name) is not None
    from worker import llm

    assert set(llm.__all__) == {"PROVIDERS", "build_model"}
    assert llm.PROVIDERS == ("openai", "anthropic", "local")


def test_library_contract_behaves() -> None:
    from worker import ScriptedModel

    assert inspect.signature(Chat).parameters["max_tool_iterations"].default == 10
    chat = Chat(model=ScriptedModel(default=lambda req: "hello"))
    reply, state = chat.chat_with_state(None, system="Be brief.", user="hi")
    assert reply == "hello" and isinstance(state, bytes)
    assert chat.chat(system="Be brief.", user="hi") == "hello"
    state = chat.append_to_state(state, "User has just visited Harrogate Theatre", pinned=False)
    assert isinstance(chat.compact(state), bytes)
    assert isinstance(worker.inspect_state(state), dict)
    tool = Tool(name="t", description="d", parameters={"type": "object"}, handler=lambda **kw: kw)
    assert tool.handler(a=1) == {"a": 1}


def test_build_model_contract() -> None:
    sig = inspect.signature(build_model)
    assert next(iter(sig.parameters)) == "provider"
    assert {"model", "base_url", "api_key"} <= keyword_only(build_model)
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values())
    for provider in ("openai", "anthropic"):
        build_model(provider, model="m", base_url="http://127.0.0.1:9", api_key="k", timeout=3.0, max_retries=1)


def test_producer_keyword_names() -> None:
    assert params(ConversationClient.from_url)[:1] == ["redis_url"]
    assert inspect.signature(ConversationClient.from_env).parameters.keys() <= {"wake"}  # callable with no argument
    assert {"message_id", "reply_to", "system", "recipient"} <= keyword_only(ConversationClient.send_message)
    assert {"message_id", "pinned"} <= keyword_only(ConversationClient.send_event)
    assert params(ConversationClient.delete) == ["self", "conversation_id"]


ENV_NAMES = {
    "REDIS_URL": ("redis_url", "redis://example:6379/3"),
    "OPENAI_API_KEY": ("openai_api_key", "sk-x"),
    "OPENAI_BASE_URL": ("openai_base_url", "http://llm:8000/v1"),
    "ANTHROPIC_API_KEY": ("anthropic_api_key", "ak-x"),
    "ANTHROPIC_BASE_URL": ("anthropic_base_url", "http://anthropic:1"),
    "PARLEY_LLM_PROVIDER": ("llm_provider", "anthropic"),
    "PARLEY_LLM_MODEL": ("llm_model", "claude-x"),
    "WHATSAPP_API_BASE_URL": ("whatsapp_api_base_url", "http://graph:1/v21.0"),
    "WHATSAPP_PHONE_NUMBER_ID": ("whatsapp_phone_number_id", "1065"),
    "WHATSAPP_ACCESS_TOKEN": ("whatsapp_access_token", "tok"),
    "WHATSAPP_APP_SECRET": ("whatsapp_app_secret", "sec"),
    "WHATSAPP_VERIFY_TOKEN": ("whatsapp_verify_token", "ver"),
}


def test_settings_read_the_documented_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    from operator import attrgetter

    from worker.settings import Settings
    from worker.settings.flat_names import ROUTE

    for env, (_, value) in ENV_NAMES.items():
        monkeypatch.setenv(env, value)
    s = Settings(_env_file=None)  # type: ignore[call-arg]
    for env, (field, value) in ENV_NAMES.items():
        got = attrgetter(".".join(ROUTE[field]))(s)  # the flat name's group and field
        got = got.get_secret_value() if hasattr(got, "get_secret_value") else got
        assert got == value, env


def test_procfile_processes() -> None:
    root = pathlib.Path(__file__).resolve().parents[1]
    procs = dict(line.split(":", 1) for line in (root / "Procfile").read_text().splitlines()
                 if line.strip() and not line.startswith("#"))
    assert procs["worker"].strip().startswith("celery -A tasks worker")
    assert "worker.ingress.app:app" in procs["webhook"] and "${PORT" in procs["webhook"]
    from starlette.routing import Route

    from worker.ingress.app import create_app

    app = create_app(None, None, app_secret="s", verify_token="v")  # type: ignore[arg-type]
    served = {(r.path, m) for r in app.routes if isinstance(r, Route) for m in (r.methods or ())}
    assert {("/webhook", "GET"), ("/webhook", "POST")} <= served
