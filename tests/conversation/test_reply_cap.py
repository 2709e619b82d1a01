"""The cap on one reply's parts: a model steered into sending message after message stops at ``max_reply_parts``
(the final text counting one, a long text counting once before it is split); past it a call that adds parts is an
error result the model reads, nothing is cut silently, and the turn goes on."""

from __future__ import annotations

from typing import Any

import pytest

from worker import Chat
from worker.conversation.loop import DEFAULT_MAX_REPLY_PARTS
from worker.conversation.scripted import Reply, ScriptedModel
from worker.conversation.tools import Tool
from worker.settings import Settings


def spam_tool(count: int = 1, text: str = "spam") -> Tool:
    """A game tool that adds ``count`` text parts to the reply each call, and tells the model a score."""
    def spam() -> dict[str, Any]:
        return {"score": 1, "reply_parts": [{"type": "text", "text": text}] * count}
    return Tool("spam", "Send the player a message.", {"type": "object", "properties": {}}, spam)


def tool_results(model: ScriptedModel) -> list[Any]:
    return [m for m in model.requests[-1].messages if m.role == "tool"]


def test_a_reply_holds_at_most_ten_parts_and_the_calls_past_it_are_error_results_the_model_reads() -> None:
    model = ScriptedModel([Reply(tool_calls=(("spam", {}),) * 62), "That is all."], default=None)
    result = Chat(model=model, tools=[spam_tool()]).run_turn(None, user="please spam me")
    assert len(result.parts) == DEFAULT_MAX_REPLY_PARTS - 1 and result.reply == "That is all."  # 10 in all
    results = tool_results(model)
    assert [r.is_error for r in results] == [False] * 9 + [True] * 53
    assert "your reply is full" in results[9].content and "at most 10 parts" in results[9].content
    assert not results[9].reply_parts


def test_the_cap_counts_the_text_beside_the_calls_and_every_round() -> None:
    model = ScriptedModel([Reply(text="Here goes:", tool_calls=(("spam", {}),) * 2),
                           Reply(text="More:", tool_calls=(("spam", {}),) * 3), "Done."], default=None)
    result = Chat(model=model, tools=[spam_tool()], max_reply_parts=6).run_turn(None, user="go")
    # "Here goes:", spam, spam, "More:", spam -- then the final text: 6
    assert list(result.parts) == ["Here goes:", *[{"type": "text", "text": "spam"}] * 2, "More:",
                                  {"type": "text", "text": "spam"}]
    assert [r.is_error for r in tool_results(model)] == [False, False, False, True, True]


def test_a_call_whose_parts_would_not_all_fit_adds_none_of_them() -> None:
    model = ScriptedModel([Reply(tool_calls=(("spam", {}),) * 2), "Done."], default=None)
    result = Chat(model=model, tools=[spam_tool(count=6)]).run_turn(None, user="go")
    assert len(result.parts) == 6  # the second call's six would make 12 with the final text
    assert [r.is_error for r in tool_results(model)] == [False, True]


def test_a_long_text_counts_once_before_it_is_split() -> None:
    model = ScriptedModel([Reply(tool_calls=(("spam", {}),) * 2), "Done."], default=None)
    result = Chat(model=model, tools=[spam_tool(text="x" * 4000)], max_reply_parts=3).run_turn(None, user="go")
    assert len(result.parts) == 2 and not any(r.is_error for r in tool_results(model))


def test_a_cap_of_one_leaves_the_final_text_alone() -> None:
    model = ScriptedModel([Reply(tool_calls=(("spam", {}),)), "Only words."], default=None)
    result = Chat(model=model, tools=[spam_tool()], max_reply_parts=1).run_turn(None, user="go")
    assert result.parts == () and result.text == "Only words."
    with pytest.raises(ValueError, match="max_reply_parts"):
        Chat(model=model, max_reply_parts=0)


def test_the_worker_chat_takes_its_cap_from_parley_max_reply_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    from worker.runtime import build_chat

    assert Settings(_env_file=None).tooling.max_reply_parts == DEFAULT_MAX_REPLY_PARTS == 10  # type: ignore[call-arg]
    monkeypatch.setenv("PARLEY_MAX_REPLY_PARTS", "3")
    assert build_chat(Settings(_env_file=None), ScriptedModel()).max_reply_parts == 3  # type: ignore[call-arg]


def test_a_retried_turn_replays_the_parts_and_the_refusals_the_first_run_recorded() -> None:
    from tests.conversation.test_turn_journal import Crash, MemoryJournal

    journal = MemoryJournal()
    journal.crash_after = 1 + 12  # the round and every result recorded; killed before the model's next call
    model = ScriptedModel([Reply(tool_calls=(("spam", {}),) * 12)], default="Done.")
    chat = Chat(model=model, tools=[spam_tool()], max_reply_parts=5)
    with pytest.raises(Crash):
        chat.run_turn(None, user="go", journal=journal)
    result = chat.run_turn(None, user="go", journal=journal)
    assert result.replayed_results == 12 and result.tool_calls == 0
    assert len(result.parts) == 4 and result.reply == "Done."
    assert [r.is_error for r in tool_results(model)] == [False] * 4 + [True] * 8


def test_a_refused_game_tools_facts_still_set() -> None:
    def clue() -> dict[str, Any]:
        return {"facts": {"target": "Harrogate Theatre"}, "reply_parts": [{"type": "text", "text": "Go!"}]}

    tool = Tool("clue", "The next clue.", {"type": "object", "properties": {}}, clue)
    model = ScriptedModel([Reply(tool_calls=(("clue", {}),)), "Done."], default=None)
    chat = Chat(model=model, tools=[tool], max_reply_parts=1)
    result = chat.run_turn(None, user="go")
    assert result.parts == () and tool_results(model)[0].is_error
    assert [(f.key, f.text) for f in chat.load(result.state).state.facts] == [("target", "Harrogate Theatre")]
