"""A lone surrogate ("\\ud800": a Python str holds it, UTF-8 cannot) in text a library caller passes is refused with
the project's own InputError and a sentence, before anything is applied: the caller's state stays usable. Text
the caller does not write (a tool's result, the model's reply) is made encodable instead, so the turn goes on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conversation.conftest import make_tool
from worker import Chat, ScriptedModel
from worker.conversation import Reply, messages
from worker.conversation.state import decode_state
from worker.errors import InputError

LONE = "\ud800"

CASES: dict[str, Callable[[Chat, bytes], Any]] = {
    "append_to_state": lambda c, s: c.append_to_state(s, f"User visited {LONE} Theatre", pinned=True),
    "chat_with_state user": lambda c, s: c.chat_with_state(s, user=f"hello {LONE}"),
    "chat_with_state system": lambda c, s: c.chat_with_state(s, system=f"You are {LONE}", user="hi"),
    "leading system message": lambda c, s: c.chat_with_state(
        s, user="hi", messages=[{"role": "system", "content": f"Note {LONE}"}]),
    "context message": lambda c, s: c.chat_with_state(
        s, user="hi", messages=[{"role": "user", "content": "earlier"}, {"role": "system", "content": LONE}]),
    "tool call arguments": lambda c, s: c.chat_with_state(s, user="hi", messages=[
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "function": {"name": "lookup", "arguments": f'{{"place": "{LONE}"}}'}}]},
        {"role": "tool", "content": "ok", "tool_call_id": "c1", "name": "lookup"}]),
    "user Message": lambda c, s: c.chat_with_state(s, user=messages.user(f"hi {LONE}")),  # type: ignore[arg-type]
    "stateless chat": lambda c, s: c.chat(user=f"hi {LONE}"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_lone_surrogate_is_an_input_error_and_the_state_stays_usable(case: str) -> None:
    model = ScriptedModel(default="fine")
    chat = Chat(model=model)
    state = chat.append_to_state(None, "User arrived in Harrogate")
    _, state = chat.chat_with_state(state, user="hi")
    before, calls = bytes(state), len(model.requests)
    with pytest.raises(InputError) as info:
        CASES[case](chat, state)
    assert not isinstance(info.value, UnicodeError)
    sentence = str(info.value)
    assert "UTF-8" in sentence and "position" in sentence and "\n" not in sentence
    sentence.encode("utf-8")  # the sentence itself can be logged
    assert len(model.requests) == calls, "refused before the model was called"
    assert state == before
    # The same bytes carry on: an event and a turn both apply to them.
    state = chat.append_to_state(state, "User visited Bettys")
    reply, state = chat.chat_with_state(state, user="and now?")
    assert reply == "fine"
    assert [m.content for m in decode_state(state).messages] == [
        "User arrived in Harrogate", "hi", "fine", "User visited Bettys", "and now?", "fine"]


def test_a_tool_result_with_a_lone_surrogate_becomes_a_replacement_character() -> None:
    tool = make_tool(handler=lambda place="": {"place": f"Harrogate {LONE} Theatre"})
    model = ScriptedModel([Reply(tool_calls=(("lookup", {"place": "x"}),)), "It opened in 1900."])
    reply, state = Chat(model=model, tools=[tool]).chat_with_state(None, user="when?")
    assert reply == "It opened in 1900."
    result = next(m for m in decode_state(state).messages if m.role == "tool")
    assert result.content == '{"place": "Harrogate \ufffd Theatre"}' and not result.is_error
    assert model.requests[1].messages[-1].content == result.content  # what the model read, too


def test_a_model_reply_with_a_lone_surrogate_is_stored_with_a_replacement_character() -> None:
    """A provider's JSON may escape half a surrogate pair ("\\ud800"): the reply, its tool calls and its wire form
    are made encodable, and the state is saved."""
    from worker.conversation import Message, ModelResponse

    wire = {"role": "assistant", "content": f"Harrogate {LONE}", "tool_calls": []}

    def reply(_: object) -> ModelResponse:
        return ModelResponse(Message(role="assistant", content=f"Harrogate {LONE}", raw=wire))

    model = ScriptedModel(default=reply)
    text, state = Chat(model=model).chat_with_state(None, user="where?")
    assert text == "Harrogate \ufffd"
    stored = decode_state(state).messages[-1]
    assert stored.content == "Harrogate \ufffd" and stored.raw == {**wire, "content": "Harrogate \ufffd"}
    assert wire["content"] == f"Harrogate {LONE}"  # the provider's object itself is left as it was


def test_a_tool_call_with_a_lone_surrogate_in_its_arguments_is_stored() -> None:
    from worker.conversation import Message, ModelResponse, ToolCall

    call = ToolCall("c1", "lookup", f'{{"place": "x{LONE}"}}')  # the arguments as the provider's JSON decoded them
    answers = [ModelResponse(Message(role="assistant", tool_calls=(call,)), finish_reason="tool_calls"),
               ModelResponse(Message(role="assistant", content="done"))]
    model = ScriptedModel(default=lambda _: answers.pop(0))
    _, state = Chat(model=model, tools=[make_tool()]).chat_with_state(None, user="go")
    stored = decode_state(state).messages
    assert stored[1].tool_calls[0].arguments == '{"place": "x\ufffd"}' and stored[-1].content == "done"
