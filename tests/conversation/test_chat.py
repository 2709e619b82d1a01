"""The chat loop: system prompt handling, tools, finish reasons, lifecycle, failures."""

from __future__ import annotations

import time

import pytest

from tests.conversation.conftest import Clock, make_tool
from worker import Chat, ScriptedModel, inspect_state
from worker.conversation import Message, Reply, RoundTrip, Usage
from worker.conversation.messages import EVENT_MARK
from worker.conversation.state import decode_state
from worker.errors import InvalidMessageError, ModelTimeoutError, OversizeInputError, RateLimitedError
from worker.testing import check_history


def test_reply_and_state_round_trip() -> None:
    model = ScriptedModel(["Hello!", "You said hi before."])
    chat = Chat(model=model)
    reply, state = chat.chat_with_state(None, system="Be brief.", user="hi")
    assert reply == "Hello!"
    assert isinstance(state, bytes)
    reply2, state2 = chat.chat_with_state(state, system="Be brief.", user="what did I say?")
    assert reply2 == "You said hi before."
    seen = model.requests[1].messages
    assert [m.role for m in seen] == ["user", "assistant", "user"]
    assert [m.content for m in seen] == ["hi", "Hello!", "what did I say?"]
    assert decode_state(state2).meta.turns == 2


def test_system_prompt_is_fresh_every_turn_and_never_stored() -> None:
    model = ScriptedModel()
    chat = Chat(model=model)
    _, state = chat.chat_with_state(None, system="Time is 10:00. SECRET-PROMPT", user="hi")
    _, state = chat.chat_with_state(state, system="Time is 10:05.", user="and now?")
    assert model.requests[0].system == "Time is 10:00. SECRET-PROMPT"
    assert model.requests[1].system == "Time is 10:05."
    assert b"SECRET-PROMPT" not in state
    assert all(m.role != "system" for m in decode_state(state).messages)


def test_leading_system_messages_are_preamble_and_later_ones_are_context() -> None:
    model = ScriptedModel()
    chat = Chat(model=model)
    _, state = chat.chat_with_state(
        None,
        system="Base prompt.",
        user="hello",
        messages=[{"role": "system", "content": "Leading note."}, {"role": "user", "content": "earlier"},
                  {"role": "system", "content": "User completed task X"}],
    )
    req = model.requests[0]
    assert req.system is not None and "Base prompt." in req.system and "Leading note." in req.system
    stored = decode_state(state).messages
    assert [m.role for m in stored][:3] == ["user", "system", "user"]
    assert stored[1].content == "User completed task X"
    assert b"Leading note." not in state


def test_tool_loop_runs_tools_and_keeps_pairs() -> None:
    model = ScriptedModel([
        Reply(tool_calls=(("lookup", {"place": "Harrogate Theatre"}), ("lookup", {"place": "Bettys"}))),
        "Both are in Harrogate.",
    ])
    chat = Chat(model=model, tools=[make_tool()])
    result = chat.run_turn(None, user="Tell me about them")
    assert result.reply == "Both are in Harrogate."
    assert result.tool_calls == 2 and result.model_calls == 2
    second = model.requests[1].messages
    assert [m.role for m in second] == ["user", "assistant", "tool", "tool"]
    assert "Harrogate Theatre" in second[2].content
    assert check_history(second) == []
    assert model.requests[0].tools[0].name == "lookup"


def test_a_turns_own_tools_join_the_chats_and_take_the_place_of_one_of_the_same_name() -> None:
    model = ScriptedModel([Reply(tool_calls=(("lookup", {"place": "x"}), ("hint", {}))), "done",
                           Reply(tool_calls=(("lookup", {"place": "y"}),)), "done again", "plain"])
    chat = Chat(model=model, tools=[make_tool()])
    own = (make_tool(handler=lambda place="": "the quiz's lookup"), make_tool("hint", handler=lambda: "a hint"))
    result = chat.run_turn(None, user="go", tools=own)
    assert [t.name for t in model.requests[0].tools] == ["lookup", "hint"]
    results = [m.content for m in model.requests[1].messages if m.role == "tool"]
    assert results == ["the quiz's lookup", "a hint"]
    # An answered event takes them too; a turn without them has the chat's tools only, the chat's own handler.
    event = chat.run_event_turn(result.state, "The clock ran out", tools=own)
    assert [t.name for t in model.requests[2].tools] == ["lookup", "hint"]
    assert "the quiz's lookup" in [m.content for m in model.requests[3].messages if m.role == "tool"]
    chat.run_turn(event.state, user="again")
    assert [t.name for t in model.requests[4].tools] == ["lookup"]


@pytest.mark.parametrize(
    ("handler", "call", "needle"),
    [
        (lambda place="": 1 / 0, ("lookup", {"place": "x"}), "ZeroDivisionError"),
        (None, ("nope", {}), "no tool named 'nope'"),
        (lambda: "x", ("lookup", {"place": "x"}), "TypeError"),
    ],
)
def test_failing_unknown_or_misused_tools_become_error_results(handler, call, needle) -> None:  # type: ignore[no-untyped-def]
    model = ScriptedModel([Reply(tool_calls=(call,)), "Sorry, that failed."])
    chat = Chat(model=model, tools=[make_tool(handler=handler)] if handler else [make_tool()])
    result = chat.run_turn(None, user="go")
    assert result.reply == "Sorry, that failed."
    tool_msg = model.requests[1].messages[-1]
    assert tool_msg.role == "tool" and tool_msg.is_error and needle in tool_msg.content


def test_hung_tool_times_out_into_an_error_result() -> None:
    model = ScriptedModel([Reply(tool_calls=(("slow", {}),)), "Gave up."])
    chat = Chat(model=model, tools=[make_tool("slow", handler=lambda: time.sleep(5), timeout=0.05)])
    started = time.monotonic()
    result = chat.run_turn(None, user="go")
    assert time.monotonic() - started < 2
    assert result.reply == "Gave up."
    assert "did not finish within" in model.requests[1].messages[-1].content


def test_malformed_tool_arguments_become_an_error_result() -> None:
    def bad(request):  # type: ignore[no-untyped-def]
        from worker.conversation import ModelResponse, ToolCall
        msg = Message(role="assistant", tool_calls=(ToolCall(id="c1", name="lookup", arguments="{not json"),))
        return ModelResponse(message=msg, finish_reason="tool_calls")

    model = ScriptedModel([bad, "ok"])
    Chat(model=model, tools=[make_tool()]).run_turn(None, user="go")
    assert "not a JSON object" in model.requests[1].messages[-1].content


def test_max_tool_iterations_then_forced_text_answer() -> None:
    looping = Reply(tool_calls=(("lookup", {"place": "x"}),))
    model = ScriptedModel([looping, looping, looping, "Final answer."])
    chat = Chat(model=model, tools=[make_tool()], max_tool_iterations=3)
    result = chat.run_turn(None, user="go")
    assert result.tool_limit_hit and result.reply == "Final answer."
    assert len(model.requests) == 4
    assert model.requests[-1].tool_choice == "none"
    assert [r.tool_choice for r in model.requests[:3]] == ["auto"] * 3


def test_model_that_keeps_calling_tools_after_none_gets_fallback() -> None:
    looping = Reply(tool_calls=(("lookup", {"place": "x"}),))
    model = ScriptedModel([looping, looping])
    chat = Chat(model=model, tools=[make_tool()], max_tool_iterations=1)
    result = chat.run_turn(None, user="go")
    assert result.reply == chat.fallback_reply
    st = decode_state(result.state)
    assert check_history(st.messages) == []


def test_length_finish_returns_partial_text_and_drops_truncated_tool_calls() -> None:
    model = ScriptedModel([Reply(text="The theatre opened in", finish_reason="length")])
    result = Chat(model=model).run_turn(None, user="history?")
    assert result.truncated and result.reply == "The theatre opened in"
    model2 = ScriptedModel([Reply(tool_calls=(("lookup", {"place": "x"}),), finish_reason="length")])
    result2 = Chat(model=model2, tools=[make_tool()]).run_turn(None, user="go")
    assert result2.truncated and result2.tool_calls == 0
    assert check_history(decode_state(result2.state).messages) == []


@pytest.mark.parametrize("reason", ["content_filter", "refusal"])
def test_filtered_answers(reason: str) -> None:
    model = ScriptedModel([Reply(text="", finish_reason=reason)])  # type: ignore[arg-type]
    chat = Chat(model=model)
    result = chat.run_turn(None, user="something bad")
    assert result.filtered and result.reply == chat.fallback_reply
    model2 = ScriptedModel([Reply(text="I can't help with that.", finish_reason=reason)])  # type: ignore[arg-type]
    assert Chat(model=model2).run_turn(None, user="x").reply == "I can't help with that."


def test_model_error_leaves_the_callers_state_untouched() -> None:
    model = ScriptedModel(["first", RateLimitedError("slow down", retry_after=2.0)])
    chat = Chat(model=model)
    _, state = chat.chat_with_state(None, user="one")
    before = bytes(state)
    with pytest.raises(RateLimitedError):
        chat.chat_with_state(state, user="two")
    assert state == before
    model.push("second")
    reply, state2 = chat.chat_with_state(state, user="two")
    assert reply == "second" and decode_state(state2).meta.turns == 2


def test_timeout_error_is_typed() -> None:
    chat = Chat(model=ScriptedModel([ModelTimeoutError("read timeout")]))
    with pytest.raises(ModelTimeoutError):
        chat.chat(user="hi")


def test_stateless_chat() -> None:
    model = ScriptedModel(["a", "b"])
    chat = Chat(model=model)
    assert chat.chat(system="s", user="one") == "a"
    assert chat.chat(system="s", user="two") == "b"
    assert [m.content for m in model.requests[1].messages] == ["two"]


@pytest.mark.parametrize("bad", ["", "   ", None, 5])
def test_bad_user_input_is_a_clear_error(bad: object) -> None:
    with pytest.raises(InvalidMessageError):
        Chat(model=ScriptedModel()).chat_with_state(None, user=bad)  # type: ignore[arg-type]


def test_oversize_input_is_refused() -> None:
    chat = Chat(model=ScriptedModel(), max_input_chars=100)
    with pytest.raises(OversizeInputError):
        chat.chat_with_state(None, user="x" * 101)
    with pytest.raises(OversizeInputError):
        chat.append_to_state(None, "y" * 101)


def test_events_reach_the_model_as_context() -> None:
    model = ScriptedModel()
    chat = Chat(model=model)
    state = chat.append_to_state(None, "User has just tagged Harrogate Theatre")
    state = chat.append_to_state(state, "Team score is 150", pinned=True)
    assert len(model.requests) == 0
    chat.chat_with_state(state, user="Where am I?")
    seen = model.requests[0].messages
    assert [m.role for m in seen] == ["event", "event", "user"]
    assert seen[1].pinned
    st = decode_state(chat.chat_with_state(state, user="x")[1])
    assert st.meta.events == 2
    assert EVENT_MARK  # providers frame events with this mark


def test_observer_sees_each_round_trip_and_cannot_break_a_turn() -> None:
    seen: list[RoundTrip] = []
    model = ScriptedModel([Reply(tool_calls=(("lookup", {}),), usage=Usage(10, 2)), Reply(text="ok", usage=Usage(20, 3))])
    chat = Chat(model=model, tools=[make_tool()], observer=seen.append)
    chat.chat(user="go")
    assert [r.usage for r in seen] == [Usage(10, 2), Usage(20, 3)]

    def broken(_: RoundTrip) -> None:
        raise RuntimeError("metrics down")

    assert Chat(model=ScriptedModel(["fine"]), observer=broken).chat(user="go") == "fine"


def test_usage_and_seen_seq_are_recorded() -> None:
    model = ScriptedModel([Reply(text="ok", usage=Usage(prompt_tokens=123, completion_tokens=7, cached_tokens=100))])
    _, state = Chat(model=model).chat_with_state(None, user="hi")
    st = decode_state(state)
    assert st.last_usage == Usage(123, 7, 100)
    assert st.seen_seq == 1  # the user message


def test_reset_phrases_start_over_without_the_model(clock: Clock) -> None:
    model = ScriptedModel(["one"])
    chat = Chat(model=model, reset_phrases=["start over", "New topic"], clock=clock)
    _, state = chat.chat_with_state(None, user="hello")
    result = chat.run_turn(state, user="  New topic! ")
    assert result.reset == "phrase" and result.reply == chat.reset_reply
    assert len(model.requests) == 1
    assert decode_state(result.state).messages == ()
    # Off unless configured: the same words are an ordinary turn.
    plain = Chat(model=ScriptedModel(["sure"]))
    assert plain.run_turn(None, user="start over").reset is None


def test_idle_gap_starts_a_fresh_conversation(clock: Clock) -> None:
    model = ScriptedModel()
    chat = Chat(model=model, idle_gap_seconds=3600, clock=clock)
    _, state = chat.chat_with_state(None, user="first")
    clock.advance(1800)
    r = chat.run_turn(state, user="second")
    assert r.reset is None and len(model.requests[-1].messages) == 3
    clock.advance(3601)
    r = chat.run_turn(r.state, user="third")
    assert r.reset == "idle_gap"
    assert [m.content for m in model.requests[-1].messages] == ["third"]
    # Off by default.
    chat2 = Chat(model=ScriptedModel(), clock=clock)
    _, s2 = chat2.chat_with_state(None, user="a")
    clock.advance(10**7)
    assert chat2.run_turn(s2, user="b").reset is None


@pytest.mark.parametrize("blob", [b"garbage", b"PLY\x09\x00", b"PLY\x01\x00\xc1", b"\x00" * 10])
def test_bad_state_never_crashes_a_turn(blob: bytes) -> None:
    result = Chat(model=ScriptedModel(["fresh start"])).run_turn(blob, user="hi")
    assert result.reply == "fresh start"
    assert result.state_problem is not None
    assert decode_state(result.state).meta.turns == 1


def test_state_of_another_provider_is_set_aside() -> None:
    _, state = Chat(model=ScriptedModel(provider="openai")).chat_with_state(None, user="hi")
    result = Chat(model=ScriptedModel(provider="anthropic")).run_turn(state, user="hi")
    assert result.state_problem is not None and result.state_problem.reason == "provider"


def test_raw_provider_fields_survive_round_trips() -> None:
    raw_extra = {"reasoning_content": "thinking...", "future_field": {"x": [1, 2]}}
    model = ScriptedModel([Reply(text="hi", raw_extra=raw_extra), "again"])
    chat = Chat(model=model)
    _, state = chat.chat_with_state(None, user="a")
    chat.chat_with_state(state, user="b")
    assistant = model.requests[1].messages[1]
    assert assistant.raw is not None and assistant.raw["future_field"] == {"x": [1, 2]}
    assert assistant.raw["reasoning_content"] == "thinking..."


def test_state_stays_under_its_byte_limit() -> None:
    model = ScriptedModel(default="x" * 3000)
    chat = Chat(model=model, max_state_bytes=20_000)
    state = None
    for i in range(60):
        _, state = chat.chat_with_state(state, user=f"turn {i} " + "y" * 2000)
        assert len(state) <= 20_000
    st = decode_state(state)
    assert st.messages[-1].content.startswith("x")
    assert inspect_state(state)["ok"]


def test_tool_results_are_capped() -> None:
    model = ScriptedModel([Reply(tool_calls=(("lookup", {}),)), "ok"])
    chat = Chat(model=model, tools=[make_tool(handler=lambda: "z" * 50_000)], max_tool_result_chars=1000)
    chat.chat(user="go")
    content = model.requests[1].messages[-1].content
    assert len(content) < 1100 and "truncated" in content


def test_a_history_a_person_opens_gets_the_games_note_first_once() -> None:
    """The note before a person's opening words comes from one place (``msgs.opening``): a new state whose first
    added message is a person's gets it, one that opens with the player's words or already has a history does not,
    and nothing added leaves the state as it was."""
    from worker.conversation.messages import OPERATOR_FIRST, opening, operator, user

    chat = Chat(model=ScriptedModel())
    assert opening([]) == []
    assert [m.content for m in opening([operator("Sam here.")])] == [OPERATOR_FIRST, "Sam here."]
    assert [m.content for m in opening([user("hi"), operator("Sam here.")])] == ["hi", "Sam here."]
    opened = decode_state(chat.apply_messages(None, [operator("Sam here."), operator("Still there?")]).state)
    assert [(m.role, m.content) for m in opened.messages] == [
        ("event", OPERATOR_FIRST), ("assistant", "Sam here."), ("assistant", "Still there?")]
    started = chat.apply_messages(None, [user("hi")]).state
    after = chat.apply_messages(started, [operator("Sam here.")]).state
    assert [m.content for m in decode_state(after).messages] == ["hi", "Sam here."]
    assert decode_state(chat.apply_messages(started, []).state).messages == decode_state(started).messages


def test_a_reset_phrase_among_the_turn_s_messages_starts_over_before_the_messages_after_it(clock: Clock) -> None:
    from worker.conversation import messages as msgs

    model = ScriptedModel(default=lambda req: "reply to " + req.messages[-1].content)
    chat = Chat(model=model, reset_phrases=["start over"], clock=clock)
    _, state = chat.chat_with_state(None, user="hello")
    result = chat.run_turn(state, messages=[msgs.user("old words"), msgs.user("Start over."),
                                            msgs.event("the player moved")], user="hi")
    assert result.reset == "phrase" and result.reply == "reply to hi"
    assert [m.content for m in model.requests[-1].messages] == ["the player moved", "hi"]
    # A photo whose caption is the phrase is not the player asking to start over.
    photo = msgs.user("start over", media=msgs.MediaRef(id="m1", mime_type="image/jpeg"))
    assert chat.run_turn(result.state, messages=[photo], user="and now").reset is None
