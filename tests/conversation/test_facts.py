"""Keyed facts (latest wins, outside the history, capped with the pinned items) and events the model answers."""

from __future__ import annotations

import pathlib

import pytest

from tests.conversation.conftest import make_tool
from worker import Chat, ScriptedModel, inspect_state
from worker.conversation import Reply
from worker.conversation.compaction import Compose, KeepLastExchanges, Summarize
from worker.conversation.messages import Message
from worker.conversation.prompt import FACTS_HEADING, PINNED_HEADING
from worker.conversation.state import FORMAT_VERSION, ConversationState, Fact, decode_state, encode_state
from worker.errors import InvalidMessageError

GOLDEN = pathlib.Path(__file__).parent / "golden"


def _facts(state: bytes) -> list[tuple[str, str]]:
    return [(f.key, f.text) for f in decode_state(state).facts]


def test_a_keyed_fact_replaces_the_one_before_and_only_the_last_reaches_the_prompt() -> None:
    model = ScriptedModel()
    chat = Chat(model=model)
    state = chat.append_to_state(None, "Your target is Bettys Cafe", key="target")
    state = chat.append_to_state(state, "The team has 10 points", key="score")
    state = chat.append_to_state(state, "Your target is the Royal Pump Room", key="target")
    state = chat.append_to_state(state, "Your target is Harrogate Theatre", key="target")
    assert _facts(state) == [("score", "The team has 10 points"), ("target", "Your target is Harrogate Theatre")]
    chat.chat_with_state(state, user="where now?")
    request = model.requests[0]
    # After the history (the prompt's start stays the same when a fact changes: the providers' caches reuse it).
    assert request.after_history is not None and FACTS_HEADING in request.after_history
    assert "Harrogate Theatre" in request.after_history and request.system is None
    assert "Bettys" not in request.after_history and "Pump Room" not in request.after_history
    assert all("target" not in m.content for m in request.messages)  # a fact is not a history message
    assert [m.role for m in request.messages] == ["user"]


def test_facts_placed_in_the_preamble_render_as_before() -> None:
    model = ScriptedModel()
    chat = Chat(model=model, facts_placement="preamble")
    state = chat.append_to_state(None, "Your target is Bettys Cafe", key="target")
    state = chat.append_to_state(state, "Your target is Harrogate Theatre", key="target")
    chat.chat_with_state(state, system="Be brief.", user="where now?")
    request = model.requests[0]
    assert request.system == f"Be brief.\n\n{PINNED_HEADING}\n- Your target is Harrogate Theatre"
    assert request.after_history is None


def test_facts_survive_every_compaction() -> None:
    summariser = ScriptedModel(default="They talked about the game.")
    chat = Chat(model=ScriptedModel(), auto_compact=False,
                compactor=Compose(Summarize(summariser, keep_last=2, batch=1), KeepLastExchanges(1)))
    state = chat.append_to_state(None, "Your target is Harrogate Theatre", key="target")
    for i in range(6):
        _, state = chat.chat_with_state(state, user=f"message {i}")
    compacted = chat.compact(state)
    assert len(decode_state(compacted).messages) < len(decode_state(state).messages)
    assert _facts(compacted) == [("target", "Your target is Harrogate Theatre")]
    assert decode_state(compacted).summary  # the compaction did run


def test_a_fact_set_while_a_compaction_ran_wins_the_splice() -> None:
    chat = Chat(model=ScriptedModel(), compactor=KeepLastExchanges(1), auto_compact=False)
    state = chat.append_to_state(None, "target A", key="target")
    for i in range(3):
        _, state = chat.chat_with_state(state, user=f"m{i}")
    compacted = chat.compact(state)  # computed from the state with target A
    newer = chat.append_to_state(state, "target B", key="target")
    spliced = chat.splice(newer, compacted)
    assert spliced.applied
    assert _facts(spliced.state) == [("target", "target B")]


def test_the_cap_drops_unkeyed_pinned_items_before_facts_and_counts_them() -> None:
    chat = Chat(model=ScriptedModel(), max_pinned=3)
    st = ConversationState.fresh("scripted")
    st = ConversationState(provider="scripted", pinned=tuple(Message(role="event", content=f"pin {i}", pinned=True,
                                                                   seq=i + 1) for i in range(2)),
                           next_seq=3, meta=st.meta)
    state = encode_state(st)
    state = chat.append_to_state(state, "fact one", key="a")
    result = chat.apply_event(state, "fact two", key="b")
    assert result.pinned_dropped == 1
    kept = decode_state(result.state)
    assert [m.content for m in kept.pinned] == ["pin 1"] and [f.key for f in kept.facts] == ["a", "b"]
    result = chat.apply_event(result.state, "fact three", key="c")
    result = chat.apply_event(result.state, "fact four", key="d")
    kept = decode_state(result.state)
    assert kept.pinned == () and [f.key for f in kept.facts] == ["b", "c", "d"]


def test_a_player_can_never_set_a_fact() -> None:
    chat = Chat(model=ScriptedModel())
    with pytest.raises(InvalidMessageError):
        chat.apply_event(None, "I am the target", key="target", from_player=True)


@pytest.mark.parametrize("key", ["", "   ", "a\nb", "x" * 129])
def test_a_bad_key_is_a_clear_error(key: str) -> None:
    with pytest.raises(InvalidMessageError, match="key"):
        Chat(model=ScriptedModel()).append_to_state(None, "text", key=key)


def test_facts_are_shown_by_inspect_state() -> None:
    state = Chat(model=ScriptedModel()).append_to_state(None, "Your target is Harrogate Theatre", key="target")
    assert inspect_state(state)["facts"] == {"target": "Your target is Harrogate Theatre"}


def test_golden_v3_with_facts_decodes_and_older_states_stay_older() -> None:
    s = decode_state((GOLDEN / "v3_facts.bin").read_bytes())
    assert s.facts == (Fact("score", "The team has 40 points"),
                       Fact("target", "The current target is Harrogate Theatre"))
    assert s.pinned == () and s.messages[0].pinned and [m.role for m in s.messages] == ["event", "user", "assistant"]
    assert FORMAT_VERSION == 5
    # Every state is written in the current format since its frames (issue 33), and a migrated one keeps its facts.
    plain = ConversationState.fresh("openai").append(Message(role="user", content="hi"))
    assert encode_state(plain)[3] == 5
    assert encode_state(s)[3] == 5 and decode_state(encode_state(s)) == s


def test_a_game_tool_sets_a_fact_and_the_model_reads_only_the_rest() -> None:
    tagged = make_tool("tag", handler=lambda place="": {"facts": {"target": f"Your target is {place}"},
                                                        "tagged": place, "points": 10})
    model = ScriptedModel([Reply(tool_calls=(("tag", {"place": "Harrogate Theatre"}),)), "Tagged!"])
    chat = Chat(model=model, tools=[tagged])
    reply, state = chat.chat_with_state(None, user="tag it")
    assert reply == "Tagged!"
    assert _facts(state) == [("target", "Your target is Harrogate Theatre")]
    second = model.requests[1]
    tool_result = second.messages[-1]
    assert tool_result.role == "tool" and '"tagged": "Harrogate Theatre"' in tool_result.content
    assert "facts" not in tool_result.content and tool_result.facts == ()
    assert second.after_history is not None and "Your target is Harrogate Theatre" in second.after_history
    assert all(not m.facts for m in decode_state(state).messages)


def test_a_malformed_facts_field_is_ignored_and_the_result_still_reaches_the_model() -> None:
    tool = make_tool("tag", handler=lambda place="": {"facts": ["not", "a", "map"], "ok": True})
    model = ScriptedModel([Reply(tool_calls=(("tag", {"place": "x"}),)), "Done."])
    _, state = Chat(model=model, tools=[tool]).chat_with_state(None, user="go")
    assert _facts(state) == [] and '"ok": true' in model.requests[1].messages[-1].content


def test_a_non_game_tool_cannot_set_a_fact() -> None:
    tool = make_tool("web", handler=lambda place="": {"facts": {"target": "attacker's choice"}}, game=False)
    model = ScriptedModel([Reply(tool_calls=(("web", {"place": "x"}),)), "Done."])
    _, state = Chat(model=model, tools=[tool]).chat_with_state(None, user="go")
    assert _facts(state) == []


# --- events the model answers -----------------------------------------------------------------------------------

def test_the_model_answers_an_event_it_reads_as_the_games() -> None:
    model = ScriptedModel(["Hi!", "You tagged Harrogate Theatre! 10 points."])
    chat = Chat(model=model)
    _, state = chat.chat_with_state(None, user="hello")
    reply, state = chat.respond_to_event(state, "The player has just tagged Harrogate Theatre", system="Be brief.")
    assert reply == "You tagged Harrogate Theatre! 10 points."
    request = model.requests[-1]
    assert [m.role for m in request.messages][-1] == "event"
    assert request.messages[-1].content == "The player has just tagged Harrogate Theatre"
    assert request.system == "Be brief."
    st = decode_state(state)
    assert [m.role for m in st.messages][-2:] == ["event", "assistant"]
    assert (st.meta.turns, st.meta.events) == (1, 1)  # the player's turns are counted apart


def test_an_answered_event_with_a_key_sets_the_fact_too() -> None:
    model = ScriptedModel()
    chat = Chat(model=model)
    state = chat.append_to_state(None, "Your target is Bettys", key="target")
    _, state = chat.respond_to_event(state, "Your target is Harrogate Theatre", key="target")
    assert _facts(state) == [("target", "Your target is Harrogate Theatre")]
    assert "Bettys" not in (model.requests[0].system or "") + (model.requests[0].after_history or "")


def test_an_answered_event_is_not_a_reset_phrase_nor_an_idle_reset(clock) -> None:  # type: ignore[no-untyped-def]
    chat = Chat(model=ScriptedModel(), reset_phrases=["start over"], idle_gap_seconds=60, clock=clock)
    _, state = chat.chat_with_state(None, user="hi")
    clock.advance(3600)
    reply, state = chat.respond_to_event(state, "start over")
    assert reply == "OK." and len(decode_state(state).messages) == 4


def test_an_idle_gap_starts_afresh_but_keeps_the_games_facts(clock) -> None:  # type: ignore[no-untyped-def]
    chat = Chat(model=ScriptedModel(), idle_gap_seconds=60, clock=clock)
    _, state = chat.chat_with_state(None, user="hi")
    state = chat.append_to_state(state, "Your target is Harrogate Theatre", key="target")
    clock.advance(3600)
    _, state = chat.chat_with_state(state, user="back again")
    st = decode_state(state)
    assert [m.content for m in st.messages if m.role == "user"] == ["back again"]  # a fresh conversation
    assert [f.key for f in st.facts] == ["target"]
