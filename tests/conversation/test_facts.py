"""Keyed facts (latest wins, outside the history, capped with the pinned items) and events the model answers."""

from __future__ import annotations

import pathlib

import pytest

from tests.conversation.conftest import Clock, make_tool
from worker import Chat, ScriptedModel, inspect_state
from worker.conversation import Reply
from worker.conversation.compaction import Compose, CompressToolExchanges, KeepLastExchanges, Summarize
from worker.conversation.messages import Message
from worker.conversation.prompt import (
    CHANGED_FACTS_HEADING,
    FACTS_HEADING,
    PINNED_HEADING,
    SETTLED_FACTS_HEADING,
    SUMMARY_HEADING,
)
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
    assert FORMAT_VERSION == 6
    # Every state is written in the current format (issue 33), and a migrated one keeps its facts; it has no facts as
    # of a preamble (version 5), so all of them count as changed since: after the history, as that release put them.
    plain = ConversationState.fresh("openai").append(Message(role="user", content="hi"))
    assert encode_state(plain)[3] == FORMAT_VERSION
    assert encode_state(s)[3] == FORMAT_VERSION and decode_state(encode_state(s)) == s and s.preamble_facts == ()


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


# --- the default placement: the facts as of the last compaction in the preamble, the changes after the history ------


def _summarising_chat(model: ScriptedModel | None = None, **kw: object) -> Chat:
    summariser = ScriptedModel(default="They talked about the game.")
    return Chat(model=model or ScriptedModel(), auto_compact=False,
                compactor=Compose(Summarize(summariser, keep_last=1, batch=1)), **kw)  # type: ignore[arg-type]


def test_a_compaction_puts_the_current_facts_in_the_preamble_and_a_change_follows_the_history_marked() -> None:
    model = ScriptedModel()
    chat = _summarising_chat(model)
    state = chat.append_to_state(None, "Your target is Bettys Cafe", key="target")
    state = chat.append_to_state(state, "The team has 10 points", key="score")
    for i in range(3):
        _, state = chat.chat_with_state(state, system="Be brief.", user=f"message {i}")
    # Before any compaction every fact is after the history, as current.
    assert model.requests[-1].after_history == (f"{FACTS_HEADING}\n- [target] Your target is Bettys Cafe\n"
                                                "- [score] The team has 10 points")
    state = chat.compact(state)
    assert decode_state(state).preamble_facts == decode_state(state).facts
    assert inspect_state(state)["preamble_facts"] == {"target": "Your target is Bettys Cafe",
                                                      "score": "The team has 10 points"}
    _, state = chat.chat_with_state(state, system="Be brief.", user="and now?")
    settled = model.requests[-1]
    assert settled.system == (f"Be brief.\n\n{SETTLED_FACTS_HEADING}\n- [target] Your target is Bettys Cafe\n"
                              f"- [score] The team has 10 points\n\n{SUMMARY_HEADING}\nThey talked about the game.")
    assert settled.after_history is None  # nothing changed since: no fact is sent twice
    state = chat.append_to_state(state, "Your target is Harrogate Theatre", key="target")
    _, state = chat.chat_with_state(state, system="Be brief.", user="where now?")
    changed = model.requests[-1]
    assert changed.system == settled.system  # the prompt's start as it was: the caches reuse it
    # The new value, with its key, under a heading that says it replaces the one of that key in the preamble.
    assert changed.after_history == f"{CHANGED_FACTS_HEADING}\n- [target] Your target is Harrogate Theatre"
    state = chat.compact(state)  # the next compaction rewrites the preamble anyway: it takes the current facts
    _, state = chat.chat_with_state(state, system="Be brief.", user="ok")
    assert "Harrogate Theatre" in (model.requests[-1].system or "") and "Bettys" not in (model.requests[-1].system or "")
    assert model.requests[-1].after_history is None


def test_the_preambles_facts_read_as_current_beside_an_older_value_the_history_kept() -> None:
    """An answered keyed event stays in the history as an event; when a newer value came after it and a compaction
    kept that exchange verbatim, the older value is later in the prompt than the preamble's: the heading says the
    preamble's facts are the current ones."""
    model = ScriptedModel()
    chat = Chat(model=model, auto_compact=False, compactor=Summarize(ScriptedModel(default="S."), keep_last=2, batch=1))
    state = chat.append_to_state(None, "target A", key="target")
    for i in range(3):
        _, state = chat.chat_with_state(state, user=f"m{i}")
    state = chat.run_event_turn(state, "target B", key="target").state
    state = chat.append_to_state(state, "target C", key="target")
    _, state = chat.chat_with_state(chat.compact(state), user="where?")
    request = model.requests[-1]
    assert any(m.content == "target B" for m in request.messages)  # kept verbatim
    assert f"{SETTLED_FACTS_HEADING}\n- [target] target C" in (request.system or "")
    assert SETTLED_FACTS_HEADING.startswith("Current facts") and request.after_history is None


def test_a_compaction_that_only_shortens_tool_outputs_leaves_the_preambles_facts() -> None:
    """It keeps the prompt's start: taking the facts into the preamble would cost the caches all that follows."""
    long = make_tool("lookup", handler=lambda place="": {"about": "x" * 600})
    script: list[Reply | str] = []
    for i in range(3):
        script += [Reply(tool_calls=(("lookup", {"place": f"p{i}"}),)), f"answer {i}"]
    chat = Chat(model=ScriptedModel(script), tools=[long], auto_compact=False,
                compactor=CompressToolExchanges(keep_recent=1))
    state = chat.append_to_state(None, "Your target is Bettys Cafe", key="target")
    for i in range(3):
        _, state = chat.chat_with_state(state, user=f"look {i}")
    compacted = decode_state(chat.compact(state))
    assert compacted.generation == 1 and compacted.preamble_facts == ()


def test_a_fact_set_while_a_compaction_ran_is_a_change_after_the_history() -> None:
    model = ScriptedModel()
    chat = _summarising_chat(model)
    state = chat.append_to_state(None, "target A", key="target")
    for i in range(3):
        _, state = chat.chat_with_state(state, user=f"m{i}")
    compacted = chat.compact(state)  # computed from the state with target A
    spliced = chat.splice(chat.append_to_state(state, "target B", key="target"), compacted)
    assert spliced.applied
    st = decode_state(spliced.state)
    assert [(f.key, f.text) for f in st.preamble_facts] == [("target", "target A")]
    chat.chat_with_state(spliced.state, user="where?")
    request = model.requests[-1]
    assert "- [target] target A" in (request.system or "")
    assert request.after_history == f"{CHANGED_FACTS_HEADING}\n- [target] target B"


def test_a_fact_the_cap_dropped_is_not_shown_from_the_preamble() -> None:
    model = ScriptedModel()
    chat = _summarising_chat(model, max_pinned=1)
    state = chat.append_to_state(None, "fact one", key="a")
    for i in range(3):
        _, state = chat.chat_with_state(state, user=f"m{i}")
    state = chat.append_to_state(chat.compact(state), "fact two", key="b")  # the cap drops fact a
    assert [f.key for f in decode_state(state).facts] == ["b"]
    chat.chat_with_state(state, user="and?")
    request = model.requests[-1]
    assert "fact one" not in (request.system or "") and SETTLED_FACTS_HEADING not in (request.system or "")
    assert request.after_history == f"{FACTS_HEADING}\n- [b] fact two"


def test_an_idle_reset_starts_with_the_facts_in_the_preamble(clock: Clock) -> None:
    model = ScriptedModel()
    chat = Chat(model=model, idle_gap_seconds=60, clock=clock)
    state = chat.append_to_state(None, "Your target is Bettys Cafe", key="target")
    _, state = chat.chat_with_state(state, user="hi")
    clock.advance(120)
    result = chat.run_turn(state, user="back again")
    assert result.reset == "idle_gap"
    assert "- [target] Your target is Bettys Cafe" in (model.requests[-1].system or "")
    assert model.requests[-1].after_history is None


def test_every_fact_after_the_history_renders_as_before() -> None:
    model = ScriptedModel()
    chat = _summarising_chat(model, facts_placement="after_history")
    state = chat.append_to_state(None, "Your target is Bettys Cafe", key="target")
    for i in range(3):
        _, state = chat.chat_with_state(state, user=f"m{i}")
    chat.chat_with_state(chat.compact(state), system="Be brief.", user="and?")
    request = model.requests[-1]
    assert request.after_history == f"{FACTS_HEADING}\n- Your target is Bettys Cafe"
    assert "Bettys" not in (request.system or "")
