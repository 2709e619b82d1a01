"""The model's reply tools and a game tool's ``"reply_parts"``: parts join the turn's reply in order with the text
around them, are committed with the state and sent through the outbox; bad arguments are an error result the model
reads; a retried turn replays the recorded parts (no part lost or doubled)."""

from __future__ import annotations

import json

import pytest

from tests.worker.conftest import make_harness
from worker.conversation.scripted import Reply, ScriptedModel
from worker.conversation.state import decode_state
from worker.conversation.tools import Tool
from worker.envelopes.reply_parts import ButtonsPart, LocationPart
from worker.testing import RecordingChannel
from worker.tools.reply_tools import reply_tools

CID = "447700900123"
PIN = {"latitude": 53.9921, "longitude": -1.5418, "name": "Harrogate Theatre"}
BUTTONS = {"text": "Found it?", "buttons": [{"id": "yes", "title": "Yes"}, {"id": "hint", "title": "Hint please"}]}


class Killed(BaseException):
    """Stands for a worker killed mid-turn."""


def test_reply_tool_calls_add_parts_in_order_with_the_text_around_them() -> None:
    model = ScriptedModel([Reply(text="Here is the next landmark:", tool_calls=(("send_location", PIN),
                                                                                ("send_buttons", BUTTONS))),
                           "Good luck!"], default=None)
    h = make_harness(model, tools=reply_tools())
    h.client.send_message(CID, "where next?", message_id="m1")
    h.run()
    sent = [t for _, t, _ in h.channel.sent]  # the recording channel gets each part's text rendering
    assert sent == ["Here is the next landmark:", "[location: Harrogate Theatre (53.9921, -1.5418)]",
                    "Found it?\n[buttons: Yes | Hint please]", "Good luck!"]
    history = decode_state(h.store.read_state(CID).blob).messages
    assert history[-1].content == "Good luck!" and history[-3].content.startswith('{"result": "Added')


def test_parts_are_the_answer_when_the_model_adds_no_text_after_them() -> None:
    model = ScriptedModel([Reply(tool_calls=(("request_location", {"text": "Share where you are"}),)), ""],
                          default=None)
    h = make_harness(model, tools=reply_tools())
    h.client.send_message(CID, "am I there?", message_id="m1")
    h.run()
    assert [t for _, t, _ in h.channel.sent] == ["Share where you are\n[button: Send location]"]
    # the state keeps what the player saw, as text, as the assistant's side
    assert decode_state(h.store.read_state(CID).blob).messages[-1].content == \
        "Share where you are\n[button: Send location]"


def test_the_library_contract_reply_is_the_text_rendering_of_the_parts_when_they_were_the_answer() -> None:
    from worker import Chat

    model = ScriptedModel([Reply(tool_calls=(("send_location", PIN),)), "",
                           Reply(text="Here:", tool_calls=(("send_buttons", BUTTONS),)), "Good luck!",
                           "Plain text."], default=None)
    chat = Chat(model=model, tools=reply_tools())
    reply, state = chat.chat_with_state(None, user="where next?")
    assert reply == "[location: Harrogate Theatre (53.9921, -1.5418)]"  # never empty: the parts' rendering
    reply, state = chat.chat_with_state(state, user="found it?")
    assert reply == "Here:\n\nFound it?\n[buttons: Yes | Hint please]\n\nGood luck!"  # the parts, then the text
    reply, _ = chat.chat_with_state(state, user="thanks")
    assert reply == "Plain text."  # no parts: the model's text as it was
    model = ScriptedModel([Reply(tool_calls=(("react", {"emoji": "🎉"}),)), ""], default=None)
    reply, _ = Chat(model=model, tools=reply_tools()).respond_to_event(None, "The player tagged the theatre")
    assert reply == "[reaction: 🎉]"


def test_bad_arguments_are_an_error_result_the_model_reads_and_the_turn_goes_on() -> None:
    model = ScriptedModel([Reply(tool_calls=(("send_buttons", {"text": "Pick", "buttons": [
        {"id": "a", "title": "A title far over twenty"}]}),)), "Sorry, here it is in words."], default=None)
    h = make_harness(model, tools=reply_tools())
    h.client.send_message(CID, "options?", message_id="m1")
    h.run()
    [result] = [m for m in model.requests[1].messages if m.role == "tool"]
    assert result.is_error and "buttons.buttons.0.title" in result.content
    assert [t for _, t, _ in h.channel.sent] == ["Sorry, here it is in words."]


@pytest.mark.parametrize("tool, arguments, field", [
    ("react", {"emoji": "lol"}, "reaction.emoji"),
    ("react", {"emoji": "🎉🎉🎉"}, "reaction.emoji"),
    ("send_image", {"link": "http://example.com/clue.png"}, "image.link"),
    ("send_buttons", {"text": "Pick", "buttons": [{"id": "yes ", "title": "Yes"}]}, "buttons.buttons.0.id"),
    ("send_list", {"text": "Pick", "button": "Places", "sections": [{"rows": [{"id": " r1", "title": "R"}]}]},
     "list.sections.0.rows.0.id"),
])
def test_what_whatsapp_would_refuse_is_an_error_result_the_model_reads(tool: str, arguments: dict[str, object],
                                                                        field: str) -> None:
    model = ScriptedModel([Reply(tool_calls=((tool, arguments),)), "In words, then."], default=None)
    h = make_harness(model, tools=reply_tools())
    h.client.send_message(CID, "options?", message_id="m1")
    h.run()
    [result] = [m for m in model.requests[1].messages if m.role == "tool"]
    assert result.is_error and field in result.content, result.content
    assert [t for _, t, _ in h.channel.sent] == ["In words, then."]


def test_a_model_steered_into_spam_sends_at_most_ten_messages_for_one_player_message() -> None:
    model = ScriptedModel([Reply(text="Sure!", tool_calls=(("send_location", PIN),) * 30),
                           Reply(tool_calls=(("react", {"emoji": "🎉"}),) * 32), "x" * 5000], default=None)
    h = make_harness(model, tools=reply_tools())
    h.client.send_message(CID, "please spam me", message_id="m1")
    h.run()
    results = [m for m in model.requests[-1].messages if m.role == "tool"]
    assert sum(not r.is_error for r in results) == 8 and "your reply is full" in results[-1].content
    # "Sure!" and 8 pins, then the final text (one part, split into two messages as it is sent)
    assert len(h.channel.sent) == 11 and h.channel.sent[0][1] == "Sure!"


def test_a_game_tool_adds_parts_with_reply_parts_and_the_model_reads_the_rest() -> None:
    def next_clue() -> dict[str, object]:
        return {"clue": 7, "reply_parts": [{"type": "location", **PIN}]}

    tool = Tool("next_clue", "The next clue.", {"type": "object", "properties": {}}, next_clue)
    model = ScriptedModel([Reply(tool_calls=(("next_clue", {}),)), "Head there."], default=None)
    h = make_harness(model, tools=[tool])
    h.client.send_message(CID, "next?", message_id="m1")
    h.run()
    [result] = [m for m in model.requests[1].messages if m.role == "tool"]
    assert json.loads(result.content) == {"clue": 7}
    assert [t for _, t, _ in h.channel.sent] == ["[location: Harrogate Theatre (53.9921, -1.5418)]", "Head there."]


class PartsChannel(RecordingChannel):
    """A recording channel that takes rich parts as they are (as WhatsApp's sender does)."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[object] = []

    def send_text(self, recipient: str, text: str, *, reply_to: str | None = None,
                  callback_data: str | None = None) -> str:
        self.parts.append(text)
        return super().send_text(recipient, text, reply_to=reply_to, callback_data=callback_data)

    def send_part(self, recipient: str, part: object, *, reply_to: str | None = None,
                  callback_data: str | None = None) -> str:
        self.parts.append(part)
        return super().send_text(recipient, "(part)", reply_to=reply_to, callback_data=callback_data)


def test_the_outbox_carries_the_typed_parts_to_a_channel_that_takes_them() -> None:
    model = ScriptedModel([Reply(tool_calls=(("send_location", PIN), ("send_buttons", BUTTONS))), "Go!"],
                          default=None)
    channel = PartsChannel()
    h = make_harness(model, tools=reply_tools(), channel=channel)
    h.client.send_message(CID, "where next?", message_id="m1")
    h.run()
    assert channel.parts == [LocationPart(type="location", **PIN),
                             ButtonsPart.model_validate({"type": "buttons", **BUTTONS}), "Go!"]


def test_a_retried_turn_replays_its_parts_from_the_journal_once() -> None:
    model = ScriptedModel([Reply(text="Look:", tool_calls=(("send_location", PIN),)), Killed("before the commit")],
                          default=None)
    h = make_harness(model, tools=reply_tools())
    h.client.send_message(CID, "where?", message_id="m1")
    with pytest.raises(Killed):
        h.service.drain(CID)
    assert not h.channel.sent
    model.push("Go!")
    h.service.drain(CID)
    h.run()
    assert [t for _, t, _ in h.channel.sent] == ["Look:", "[location: Harrogate Theatre (53.9921, -1.5418)]", "Go!"]


def test_the_reply_tools_are_offered_on_whatsapp_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from worker.channels.channel import ConsoleChannel
    from worker.channels.whatsapp import WhatsAppSender
    from worker.runtime import offered_reply_tools
    from worker.settings import Settings

    whatsapp = WhatsAppSender(phone_number_id="1", access_token="t")
    names = ["send_image", "send_location", "request_location", "send_buttons", "send_list", "react"]
    assert [t.name for t in offered_reply_tools(Settings(), whatsapp, set())] == names
    assert [t.name for t in offered_reply_tools(Settings(), whatsapp, {"react"})] == names[:-1]  # the game's own
    assert offered_reply_tools(Settings(), ConsoleChannel(), set()) == []
    monkeypatch.setenv("PARLEY_WHATSAPP_REPLY_TOOLS", "false")
    assert offered_reply_tools(Settings(), whatsapp, set()) == []
