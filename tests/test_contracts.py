"""The names others build against (DESIGN.md, "Contracts others build against"). A rename breaks users: it must
break this test first."""

from __future__ import annotations

import inspect

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
