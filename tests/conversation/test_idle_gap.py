"""The idle gap is the player's silence: game events do not refresh it (a steady stream of them kept the idle
reset from ever firing), and the events the game sent during the silence survive the reset as context."""

from __future__ import annotations

from tests.conversation.conftest import Clock
from worker.conversation.chat import Chat
from worker.conversation.scripted import ScriptedModel
from worker.conversation.state import decode_state


def test_a_steady_stream_of_events_does_not_hold_the_idle_reset_off(clock: Clock) -> None:
    model = ScriptedModel()
    chat = Chat(model=model, idle_gap_seconds=3600, clock=clock)
    _, state = chat.chat_with_state(None, user="my secret plan")
    for i in range(6):  # an event every 20 minutes for two hours
        clock.advance(1200)
        state = chat.apply_event(state, f"tick {i}").state
    result = chat.run_turn(state, user="back again")
    assert result.reset == "idle_gap"
    sent = [m.content for m in model.requests[-1].messages if m.role != "system"]
    assert "my secret plan" not in " ".join(sent)
    assert sent[-1] == "back again"
    # What the game said during the silence is kept, in order, as events.
    kept = [m for m in decode_state(result.state).messages if m.role == "event"]
    assert [m.content for m in kept] == [f"tick {i}" for i in range(6)]


def test_events_before_the_player_ever_spoke_are_not_reset(clock: Clock) -> None:
    model = ScriptedModel()
    chat = Chat(model=model, idle_gap_seconds=60, clock=clock)
    state = chat.apply_event(None, "the player joined team red", pinned=True).state
    clock.advance(10_000)
    result = chat.run_turn(state, user="hi")
    assert result.reset is None
    assert [m.content for m in decode_state(result.state).messages][:1] == ["the player joined team red"]


def test_the_player_s_messages_still_refresh_the_clock(clock: Clock) -> None:
    chat = Chat(model=ScriptedModel(), idle_gap_seconds=3600, clock=clock)
    _, state = chat.chat_with_state(None, user="one")
    for _ in range(4):
        clock.advance(3000)
        result = chat.run_turn(state, user="again")
        assert result.reset is None
        state = result.state


def test_a_pin_or_reaction_the_player_sent_refreshes_the_clock(clock: Clock) -> None:
    """A location the player shared is the player speaking (stored as their words): it moves the idle clock, as a
    game event does not."""
    chat = Chat(model=ScriptedModel(), idle_gap_seconds=3600, clock=clock)
    _, state = chat.chat_with_state(None, user="one")
    for i in range(4):
        clock.advance(3000)
        state = chat.apply_event(state, f"shared a pin {i}", from_player=True).state
    clock.advance(3000)
    assert chat.run_turn(state, user="still here").reset is None


def test_what_the_player_comes_back_to_survives_the_idle_reset(clock: Clock) -> None:
    """During the silence the model answered a game event and a person wrote; the player who comes back is answering
    them: both are kept (the answer to the player's own last message is not), and the history is valid as it is."""
    from worker.conversation.messages import OPERATOR_FIRST, operator
    from worker.testing import check_history

    model = ScriptedModel(default=lambda req: "reply to " + req.messages[-1].content)
    chat = Chat(model=model, idle_gap_seconds=3600, clock=clock)
    _, state = chat.chat_with_state(None, user="my secret plan")
    clock.advance(5000)
    state = chat.run_event_turn(state, "Round 2 starts at the Pump Room").state
    state = chat.apply_messages(state, [operator("Sam here: need a hint?")]).state
    result = chat.run_turn(state, user="yes please")
    assert result.reset == "idle_gap"
    sent = [m.content for m in model.requests[-1].messages if m.role != "system"]
    assert sent == ["Round 2 starts at the Pump Room", "reply to Round 2 starts at the Pump Room",
                    "Sam here: need a hint?", "yes please"]
    assert check_history(model.requests[-1].messages) == []
    # A person's message alone after the silence gets the game's note before it.
    _, state = chat.chat_with_state(None, user="hello")
    clock.advance(5000)
    state = chat.apply_messages(state, [operator("Sam here.")]).state
    chat.run_turn(state, user="hi Sam")
    assert [m.content for m in model.requests[-1].messages if m.role != "system"] == [
        OPERATOR_FIRST, "Sam here.", "hi Sam"]


def test_pinned_items_survive_the_idle_reset_and_an_explicit_reset_clears_them(clock: Clock) -> None:
    """A pinned item is pinned because it stays true ("joined team Owls"): the player's silence does not end it,
    whether it was still in the history or already compacted into the pinned items; the player's reset phrase
    does."""
    from worker import KeepLastExchanges
    from worker.conversation.prompt import PINNED_HEADING

    model = ScriptedModel()
    chat = Chat(model=model, idle_gap_seconds=3600, clock=clock, compactor=KeepLastExchanges(1),
                reset_phrases=("start over",))
    state = chat.apply_event(None, "the player joined team Owls", pinned=True).state
    _, state = chat.chat_with_state(state, user="which team am I on?")
    _, state = chat.chat_with_state(state, user="and now?")
    _, state = chat.chat_with_state(state, user="and then?")
    state = chat.compact(state)
    state = chat.apply_event(state, "the player found the lantern", pinned=True).state
    _, state = chat.chat_with_state(state, user="what do I carry?")
    before = decode_state(state)  # one pinned item compacted out of the history, one still in it
    assert [m.content for m in before.pinned] == ["the player joined team Owls"]
    assert "the player found the lantern" in [m.content for m in before.messages]
    clock.advance(5000)
    result = chat.run_turn(state, user="back again")
    assert result.reset == "idle_gap"
    preamble = model.requests[-1].system or ""
    assert PINNED_HEADING in preamble
    assert "the player joined team Owls" in preamble and "the player found the lantern" in preamble
    assert "which team am I on?" not in " ".join(m.content for m in model.requests[-1].messages)
    # A reset the player asks for clears them.
    state = chat.run_turn(result.state, user="start over").state
    chat.run_turn(state, user="hello")
    assert "team Owls" not in (model.requests[-1].system or "")
    assert not decode_state(chat.run_turn(state, user="hi").state).pinned
