"""The turn journal in the core: a turn that crashed after a tool call is retried without calling the tool, or the
model for the rounds it already had, again; the loop goes on live after the last recorded step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from worker.conversation.chat import Chat
from worker.conversation.messages import Message, ToolCall
from worker.conversation.model import ModelRequest, ModelResponse, Usage
from worker.conversation.scripted import Reply, ScriptedModel
from worker.conversation.state import decode_state
from worker.conversation.tools import Tool
from worker.conversation.turn_journal import decode_result, decode_round, encode_result, encode_round
from worker.errors import StateDecodeError


class Crash(Exception):
    """Stands for the worker being killed: nothing after it in the turn happens."""


class MemoryJournal:
    """A journal kept in a dict of encoded entries, as the store keeps them; ``crash_after`` raises
    :class:`Crash` once that many entries were recorded (the kill lands right after a durable write), and
    ``crash_before_result`` raises instead of recording a result (the kill lands inside the tool call)."""

    def __init__(self) -> None:
        self.rounds: dict[int, bytes] = {}
        self.results: dict[tuple[int, str], bytes] = {}
        self.crash_after: int | None = None
        self.crash_before_result = False

    def recorded_rounds(self) -> Sequence[ModelResponse]:
        return [decode_round(self.rounds[i]) for i in sorted(self.rounds)]

    def recorded_results(self) -> Mapping[tuple[int, str], Message]:
        return {k: decode_result(v) for k, v in self.results.items()}

    def record_round(self, step: int, response: ModelResponse) -> None:
        self.rounds[step] = encode_round(response)
        self._maybe_crash()

    def record_result(self, step: int, result: Message) -> None:
        if self.crash_before_result:
            self.crash_before_result = False
            raise Crash("killed inside the tool call")
        assert result.tool_call_id is not None
        self.results[(step, result.tool_call_id)] = encode_result(result)
        self._maybe_crash()

    def _maybe_crash(self) -> None:
        if self.crash_after is not None and len(self.rounds) + len(self.results) >= self.crash_after:
            self.crash_after = None
            raise Crash("killed after a write")


def _game() -> tuple[Tool, list[tuple[str, int]]]:
    """A side-effecting tool that records every call it gets (the call's amount)."""
    calls: list[tuple[str, int]] = []

    def give(amount: int) -> dict[str, int]:
        calls.append(("give", amount))
        return {"gold": 100 + amount}

    return Tool("give_gold", "Give the player gold.", {"type": "object", "properties": {"amount": {"type": "integer"}}},
                give), calls


def _answer_from_results(request: ModelRequest) -> str:
    results = [m.content for m in request.messages if m.role == "tool"]
    return "final: " + " | ".join(results)


def test_codecs_round_trip_the_provider_form_and_refuse_garbage() -> None:
    call = ToolCall(id="call_7", name="give_gold", arguments='{"amount": 5}')
    raw = {"role": "assistant", "content": None, "tool_calls": [{"id": "call_7"}], "thinking": [{"sig": "x"}]}
    response = ModelResponse(message=Message(role="assistant", tool_calls=(call,), raw=raw), finish_reason="tool_calls",
                             usage=Usage(10, 2, 3, 4), raw_finish_reason="tool_use", model="m-1")
    back = decode_round(encode_round(response))
    assert back == response and back.message.raw == raw
    result = Message(role="tool", content='{"gold": 105}', tool_call_id="call_7", name="give_gold", is_error=True)
    assert decode_result(encode_result(result)) == result
    for garbage in (b"", b"\xc1", encode_result(result)):
        with pytest.raises(StateDecodeError):
            decode_round(garbage)
    with pytest.raises(StateDecodeError):
        decode_result(encode_round(response))


def test_a_turn_killed_after_the_tool_result_was_recorded_makes_no_second_tool_or_model_call() -> None:
    tool, calls = _game()
    model = ScriptedModel([Reply(tool_calls=(("give_gold", {"amount": 5}),)), Crash("killed before the commit")],
                          default=None)
    chat = Chat(model=model, tools=[tool])
    journal = MemoryJournal()
    with pytest.raises(Crash):
        chat.run_turn(None, user="give me gold", journal=journal)
    assert calls == [("give", 5)] and len(model.requests) == 2

    model.push(_answer_from_results)
    result = chat.run_turn(None, user="give me gold", journal=journal)
    assert calls == [("give", 5)], "the retried turn called the side-effecting tool again"
    assert len(model.requests) == 3, "the recorded round was asked of the model again"
    assert (result.model_calls, result.tool_calls, result.replayed_rounds, result.replayed_results) == (1, 0, 1, 1)
    assert result.reply == 'final: {"gold": 105}'
    first_call_id = decode_round(journal.rounds[0]).message.tool_calls[0].id
    assert [m.tool_call_id for m in model.requests[-1].messages if m.role == "tool"] == [first_call_id]


def test_a_kill_inside_the_tool_call_repeats_it_with_the_same_call_id() -> None:
    tool, calls = _game()
    seen_ids: list[str] = []
    model = ScriptedModel([Reply(tool_calls=(("give_gold", {"amount": 7}),))], default=None)
    chat = Chat(model=model, tools=[tool])
    journal = MemoryJournal()
    journal.crash_before_result = True
    with pytest.raises(Crash):
        chat.run_turn(None, user="gold", journal=journal)
    seen_ids.append(decode_round(journal.rounds[0]).message.tool_calls[0].id)

    model.push(_answer_from_results)
    result = chat.run_turn(None, user="gold", journal=journal)
    assert calls == [("give", 7), ("give", 7)]  # repeated: its result was never recorded
    assert list(journal.results) == [(0, seen_ids[0])], "the repeated call must keep the recorded call id"
    assert (result.model_calls, result.replayed_rounds, result.replayed_results) == (1, 1, 0)


def test_two_rounds_replay_in_order_and_the_loop_goes_on_live_after_the_last_recorded_step() -> None:
    tool, calls = _game()
    model = ScriptedModel([Reply(tool_calls=(("give_gold", {"amount": 1}), ("give_gold", {"amount": 2}))),
                           Reply(tool_calls=(("give_gold", {"amount": 3}),))], default=None)
    chat = Chat(model=model, tools=[tool])
    journal = MemoryJournal()
    journal.crash_after = 4  # round 0, its two results, round 1: killed before round 1's tool ran
    with pytest.raises(Crash):
        chat.run_turn(None, user="gold", journal=journal)
    assert calls == [("give", 1), ("give", 2)] and len(model.requests) == 2

    model.push(_answer_from_results)
    result = chat.run_turn(None, user="gold", journal=journal)
    assert calls == [("give", 1), ("give", 2), ("give", 3)]
    assert len(model.requests) == 3
    assert result.reply == 'final: {"gold": 101} | {"gold": 102} | {"gold": 103}'
    assert (result.replayed_rounds, result.replayed_results, result.tool_calls) == (2, 2, 1)


def test_without_a_journal_a_retried_turn_calls_again_as_before() -> None:
    tool, calls = _game()
    model = ScriptedModel([Reply(tool_calls=(("give_gold", {"amount": 5}),)), "done",
                           Reply(tool_calls=(("give_gold", {"amount": 5}),)), "done"], default=None)
    chat = Chat(model=model, tools=[tool])
    for _ in range(2):
        assert chat.run_turn(None, user="gold").reply == "done"
    assert len(calls) == 2 and len(model.requests) == 4


def test_a_final_answer_is_not_recorded_so_only_tool_rounds_cost_a_write() -> None:
    tool, _ = _game()
    journal = MemoryJournal()
    Chat(model=ScriptedModel(["hello"], default=None), tools=[tool]).run_turn(None, user="hi", journal=journal)
    assert journal.rounds == {} and journal.results == {}


def test_a_replayed_tool_result_sets_its_facts_again() -> None:
    calls: list[str] = []

    def tag(place: str) -> dict[str, object]:
        calls.append(place)
        return {"facts": {"target": f"Next: {place}"}, "tagged": place}

    tool = Tool("tag", "Tag a place.", {"type": "object", "properties": {"place": {"type": "string"}}}, tag,
                idempotent=False)
    model = ScriptedModel([Reply(tool_calls=(("tag", {"place": "the theatre"}),)), Crash("killed before the commit")],
                          default=None)
    chat = Chat(model=model, tools=[tool])
    journal = MemoryJournal()
    with pytest.raises(Crash):
        chat.run_turn(None, user="tag it", journal=journal)
    model.push("Tagged.")
    result = chat.run_turn(None, user="tag it", journal=journal)
    assert calls == ["the theatre"] and result.replayed_results == 1
    assert [(f.key, f.text) for f in decode_state(result.state).facts] == [("target", "Next: the theatre")]
