"""Each message's time: kept by state format 6 (whole seconds), none for a message of an older state, given by the
write that adds a message without one, and never shown to a model."""

from __future__ import annotations

import pathlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conversation.conftest import Clock, make_tool
from worker import Chat, inspect_state
from worker.conversation import messages as msgs
from worker.conversation.message_times import from_seconds
from worker.conversation.messages import Message, ToolCall
from worker.conversation.model import ModelRequest
from worker.conversation.scripted import Reply, ScriptedModel
from worker.conversation.state import (
    ConversationState,
    decode_state,
    decode_with_memo,
    encode_state,
    encode_with_memo,
)
from worker.errors import InvalidMessageError, StateDecodeError
from worker.llm import anthropic_messages, openai_chat

GOLDEN = pathlib.Path(__file__).parent / "golden"
T0 = 1_800_000_000.0


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def test_golden_v6_keeps_each_messages_time_and_none_where_it_had_none() -> None:
    """A base and one frame of format 6: the player's messages with WhatsApp's time, the rest with their turn's; the
    first message was written without one."""
    s = decode_state((GOLDEN / "v6_times.bin").read_bytes())
    assert [m.role for m in s.messages] == ["event", "user", "assistant", "user", "assistant", "tool", "assistant"]
    assert [m.at for m in s.messages] == [None, _at(1800000050), *[_at(t) for t in (1800000052, 1800000100)],
                                          *[_at(1800000103)] * 3]
    assert s.messages[4].tool_calls == (ToolCall("call_1", "lookup", '{"place": "church"}'),)


@pytest.mark.parametrize("name", ["v1_small.bin", "v2_media.bin", "v3_facts.bin", "v4_frames.bin",
                                  "v5_preamble_facts.bin", "v5_runs.bin"])
def test_a_state_of_an_older_format_decodes_with_no_times(name: str) -> None:
    s = decode_state((GOLDEN / name).read_bytes())
    assert s.messages and all(m.at is None for m in (*s.messages, *s.pinned))


def test_a_format_5_state_stays_format_5_until_format_6_is_written_then_moves_whole() -> None:
    """The upgrade rule: a writer told format 5 (``PARLEY_STATE_FORMAT=5``, while processes of the release before
    share the states) appends to a format-5 blob in format 5, storing no time; told 6, the next write is the state
    whole in format 6 (once), then appended to, the new messages' times kept."""
    v5 = (GOLDEN / "v5_preamble_facts.bin").read_bytes()
    memo = decode_with_memo(v5)
    grown = memo.state.append(Message(role="user", content="and now?"), at=_at(T0))
    blob5, after5 = encode_with_memo(grown, memo, version=5)
    assert blob5[3] == 5 and after5.written_from == len(v5) and blob5.startswith(v5)
    assert decode_state(blob5).messages[-1] == replace(grown.messages[-1], at=None)
    blob6, after6 = encode_with_memo(grown, memo, version=6)
    assert blob6[3] == 6 and after6.written_from == 0 and decode_state(blob6) == grown
    more = grown.append(Message(role="assistant", content="Climb."), at=_at(T0 + 1))
    blob7, after7 = encode_with_memo(more, after6)
    assert after7.written_from == len(blob6) and decode_state(blob7) == more
    assert [m.at for m in decode_state(blob7).messages][-3:] == [None, _at(T0), _at(T0 + 1)]


def test_only_formats_5_and_6_are_written() -> None:
    s = ConversationState.fresh("openai")
    for version in (4, 7):
        with pytest.raises(ValueError, match="format 5 or 6"):
            encode_state(s, version=version)
    with pytest.raises(ValueError, match="format 5 or 6"):
        Chat(model=ScriptedModel(), state_format=4)


times = st.none() | st.integers(-62_135_596_800, 253_402_300_799).map(from_seconds)
timed_messages = st.lists(st.builds(
    Message, role=st.sampled_from(["user", "assistant", "event", "system"]), content=st.text(max_size=30),
    pinned=st.booleans(), at=times), max_size=10)


@settings(max_examples=200, deadline=None)
@given(timed_messages, timed_messages)
def test_states_round_trip_with_and_without_times_in_either_format(base: list[Message], added: list[Message]) -> None:
    """Whole or appended, format 6 gives back every message as it was; format 5 the same messages without times."""
    first = ConversationState.fresh("openai").append(*base)
    grown = first.append(*added)
    for version in (5, 6):
        blob, memo = encode_with_memo(first, version=version)
        appended, _ = encode_with_memo(grown, memo, version=version)
        for out, state in ((blob, first), (appended, grown), (encode_state(grown, version=version), grown)):
            expect = state if version == 6 else replace(
                state, messages=tuple(replace(m, at=None) for m in state.messages))
            assert decode_state(out) == expect


def test_a_time_is_kept_to_the_second() -> None:
    at = datetime(2026, 11, 28, 13, 0, 5, 999_999, tzinfo=timezone(timedelta(hours=1)))
    s = ConversationState.fresh("openai").append(Message(role="user", content="hi", at=at))
    assert decode_state(encode_state(s)).messages[0].at == datetime(2026, 11, 28, 12, 0, 5, tzinfo=UTC)


@pytest.mark.parametrize("t", [1.5, "1800000000", 253_402_300_800, -62_135_596_801, True])
def test_a_bad_time_is_an_invalid_state(t: object) -> None:
    blob = encode_state(ConversationState.fresh("openai").append(Message(role="user", content="hi", at=_at(T0))))
    body = msgpack.unpackb(blob[9:])
    assert body["m"][0]["t"] == int(T0)
    body["m"][0]["t"] = t
    bad = blob[:5] + len(msgpack.packb(body)).to_bytes(4, "big") + msgpack.packb(body)
    with pytest.raises(StateDecodeError) as err:
        decode_state(bad)
    assert err.value.reason == "invalid"


def test_a_naive_time_is_refused() -> None:
    with pytest.raises(InvalidMessageError, match="timezone-aware"):
        msgs.validated(Message(role="user", content="hi", at=datetime(2026, 1, 1)))


def test_a_turn_gives_its_messages_its_time_and_keeps_the_players_own(clock: Clock) -> None:
    """The player's message keeps the time it came with (WhatsApp's); the event before it without one, the
    assistant's tool call, the tool's result and the reply take the turn's (the chat's clock, read once)."""
    clock.now = T0 + 0.75
    model = ScriptedModel([Reply(tool_calls=(("lookup", {"place": "church"}),)), "Climb the bell tower."])
    chat = Chat(model=model, tools=[make_tool()], clock=clock)
    said = replace(msgs.user("where now?"), at=_at(T0 - 30))
    result = chat.run_turn(None, user=said, messages=[msgs.event("The bell rang")])
    s = decode_state(result.state)
    assert [m.role for m in s.messages] == ["event", "user", "assistant", "tool", "assistant"]
    assert [m.at for m in s.messages] == [_at(T0), _at(T0 - 30), _at(T0), _at(T0), _at(T0)]
    assert result.resident is not None and result.resident.state == s  # what the worker keeps is what it stored
    clock.advance(60)
    _, blob = chat.chat_with_state(result.state, user="thanks")
    assert [m.at for m in decode_state(blob).messages][-2:] == [_at(T0 + 60), _at(T0 + 60)]
    assert decode_state(blob).messages[:5] == s.messages


def test_events_operators_and_event_turns_take_the_writes_time(clock: Clock) -> None:
    chat = Chat(model=ScriptedModel(["You tagged it!"]), clock=clock)
    blob = chat.append_to_state(None, "User tagged Harrogate Theatre")
    clock.advance(10)
    blob = chat.apply_messages(blob, [msgs.operator("Sam here.")]).state
    clock.advance(10)
    _, blob = chat.respond_to_event(blob, "The theatre's doors open")
    s = decode_state(blob)
    assert [(m.role, m.at) for m in s.messages] == [
        ("event", _at(T0)), ("assistant", _at(T0 + 10)), ("event", _at(T0 + 20)), ("assistant", _at(T0 + 20))]


def test_a_chat_that_writes_format_5_keeps_no_times(clock: Clock) -> None:
    """Told format 5 (a fleet still running the release before), nothing is timed, not even the player's own
    time: the state kept in memory is the one stored."""
    chat = Chat(model=ScriptedModel(), clock=clock, state_format=5)
    result = chat.run_turn(None, user=replace(msgs.user("hi"), at=_at(T0 - 30)))
    assert result.state[3] == 5
    s = decode_state(result.state)
    assert all(m.at is None for m in s.messages) and result.resident is not None and result.resident.state == s
    blob = chat.apply_messages(result.state, [replace(msgs.user("again"), at=_at(T0))], from_player=True).state
    assert blob[3] == 5 and all(m.at is None for m in decode_state(blob).messages)


def test_what_a_model_reads_is_the_same_with_and_without_times() -> None:
    history = [msgs.user("where is the clue?"),
               Message(role="assistant", content="", tool_calls=(ToolCall("c1", "lookup", "{}"),)),
               Message(role="tool", content="the bell tower", tool_call_id="c1", name="lookup"),
               Message(role="assistant", content="Climb the bell tower."), msgs.event("The bell rang"),
               msgs.operator("Sam here.")]
    timed = [replace(m, at=_at(T0 + i)) for i, m in enumerate(history)]
    for module in (openai_chat, anthropic_messages):
        plain = module.render_messages(ModelRequest(system="Be brief.", messages=history))
        assert module.render_messages(ModelRequest(system="Be brief.", messages=timed)) == plain


def test_inspect_state_shows_a_messages_time_when_it_has_one(clock: Clock) -> None:
    blob = Chat(model=ScriptedModel(), clock=clock).chat_with_state(None, user="hi")[1]
    assert [m.get("at") for m in inspect_state(blob)["history"]] == ["2027-01-15T08:00:00+00:00"] * 2
    old = inspect_state((GOLDEN / "v5_runs.bin").read_bytes())
    assert all("at" not in m for m in old["history"])
