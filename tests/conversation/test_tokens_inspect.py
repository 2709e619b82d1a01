from __future__ import annotations

import json

import pytest

from worker import Chat, ScriptedModel, inspect_state
from worker.conversation import EstimateCounter, Message, TiktokenCounter, ToolCall
from worker.conversation.state import decode_state, encode_state
from worker.conversation.tokens import encoding_for_model
from worker.errors import ConfigurationError


def test_tiktoken_counter_is_exact_and_offline() -> None:
    # Token ids published for these encodings: "hello world" is [15339, 1917] in cl100k_base and
    # [24912, 2375] in o200k_base.
    cl = TiktokenCounter(encoding="cl100k_base")
    o2 = TiktokenCounter(model="gpt-4o-mini")
    assert cl._encoding.encode("hello world") == [15339, 1917]  # type: ignore[attr-defined]
    assert o2._encoding.encode("hello world") == [24912, 2375]  # type: ignore[attr-defined]
    assert o2.encoding_name == "o200k_base"
    assert cl.count_text("") == 0
    assert cl.count_text("<|endoftext|>") > 1  # special tokens in user text are plain text


@pytest.mark.parametrize(("model", "enc"), [("gpt-4o", "o200k_base"), ("gpt-5-mini", "o200k_base"),
                                            ("o3", "o200k_base"), ("gpt-4-turbo", "cl100k_base"),
                                            ("gpt-3.5-turbo", "cl100k_base"), ("llama3", "cl100k_base")])
def test_encoding_by_model_name(model: str, enc: str) -> None:
    assert encoding_for_model(model) == enc


def test_unknown_encoding_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        TiktokenCounter(encoding="p50k_base")


@pytest.mark.parametrize("counter", [EstimateCounter(), TiktokenCounter(encoding="cl100k_base")])
def test_tool_calls_and_results_are_counted(counter) -> None:  # type: ignore[no-untyped-def]
    plain = Message(role="assistant", content="ok")
    with_call = Message(role="assistant", content="ok",
                        tool_calls=(ToolCall("c1", "lookup", json.dumps({"place": "Harrogate Theatre" * 5})),))
    result = Message(role="tool", content="x " * 100, tool_call_id="c1")
    assert counter.count_message(with_call) > counter.count_message(plain) + 10
    assert counter.count_message(result) > 50
    assert counter.count_messages([plain, result]) == counter.count_message(plain) + counter.count_message(result)


def test_inspect_state_views() -> None:
    chat = Chat(model=ScriptedModel(["hi there"]))
    state = chat.append_to_state(None, "tagged Harrogate Theatre", pinned=True)
    _, state = chat.chat_with_state(state, user="hello")
    view = inspect_state(state)
    assert view["ok"] and view["turns"] == 1 and view["events"] == 1
    assert [h["role"] for h in view["history"]] == ["event", "user", "assistant"]
    assert view["history"][0]["pinned"]
    # The library's turn appended to the event's blob: the view shows the whole state and how much was appended.
    assert 0 < view["appended_bytes"] < view["bytes"]
    assert inspect_state(encode_state(decode_state(state)))["appended_bytes"] == 0
    json.dumps(view)  # serialisable for the CLI
    assert inspect_state(None) == {"ok": True, "empty": True, "bytes": 0}
    bad = inspect_state(b"junk")
    assert bad["ok"] is False and bad["problem"] == "corrupt"
