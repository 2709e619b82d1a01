"""Rich reply parts: the limits each kind is checked against, the Cloud API body each is sent as (against the
documented shapes in tests/fixtures/whatsapp_send), the outbox records of older workers, and the other channels."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest

from tests.support.fake_whatsapp import FakeWhatsApp
from tests.support.store_kit import raw
from tests.worker.conftest import make_harness
from worker.channels.channel import ConsoleChannel, WebhookChannel
from worker.channels.whatsapp import WhatsAppSender
from worker.channels.window import ServiceWindow, Template
from worker.conversation.state import decode_state
from worker.envelopes.inputs import ReplyRecord, decode_reply
from worker.envelopes.reply_parts import (
    ButtonsPart,
    LocationPart,
    ReactionPart,
    parse_part,
    parse_parts,
    part_json,
    render,
)
from worker.errors import InvalidReplyPartError

FIXTURES = Path(__file__).parent.parent / "fixtures" / "whatsapp_send"
TO = "447700900123"
NOW = 1_800_000_000.0
CID = "447700900123"


@pytest.fixture
def api() -> Iterator[FakeWhatsApp]:
    a = FakeWhatsApp().start()
    yield a
    a.stop()


def sender(base_url: str = "http://127.0.0.1:9/v21.0", template: Template | None = None) -> WhatsAppSender:
    return WhatsAppSender(phone_number_id="106540352242922", access_token="tok", base_url=base_url,
                          window=ServiceWindow(86_400.0, template))


@pytest.mark.parametrize("name", sorted(p.stem for p in FIXTURES.glob("*.json")))
def test_each_kind_is_sent_as_the_documented_body(name: str) -> None:
    fixture = json.loads((FIXTURES / f"{name}.json").read_text())
    part = parse_part(fixture["part"])
    assert sender().body(TO, part, reply_to=fixture.get("reacts_to")) == fixture["body"]  # type: ignore[arg-type]
    assert part_json(part) == fixture["part"]  # the JSON form reads back as written


def test_a_part_threads_to_the_players_message_and_carries_its_callback_data() -> None:
    body = sender().body(TO, ButtonsPart(type="buttons", text="Stuck?", buttons=[{"id": "hint", "title": "Hint"}]),  # type: ignore[list-item]
                         reply_to="wamid.in", callback_data="c|r|0")
    assert body["context"] == {"message_id": "wamid.in"} and body["biz_opaque_callback_data"] == "c|r|0"
    reaction = sender().body(TO, ReactionPart(type="reaction", emoji="👍"), reply_to="wamid.in")
    assert "context" not in reaction and reaction["reaction"]["message_id"] == "wamid.in"
    # A reaction with no message to react to goes as its emoji (a reaction to nothing would be refused).
    assert sender().body(TO, ReactionPart(type="reaction", emoji="👍"))["text"]["body"] == "👍"


_ROW = {"id": "r", "title": "Row"}


@pytest.mark.parametrize("part, field", [
    ({"type": "buttons", "text": "Go?", "buttons": [{"id": "a", "title": "x" * 21}]}, "part.buttons.0.title"),
    ({"type": "buttons", "text": "Go?", "buttons": [{"id": str(i), "title": str(i)} for i in range(4)]},
     "part.buttons"),
    ({"type": "buttons", "text": "Go?", "buttons": []}, "part.buttons"),
    ({"type": "buttons", "text": "Go?", "buttons": [{"id": "a", "title": "A"}, {"id": "a", "title": "B"}]}, "part"),
    ({"type": "buttons", "text": "Go?", "buttons": [{"id": "a", "title": "A"}, {"id": "b", "title": "A"}]}, "part"),
    ({"type": "buttons", "text": "x" * 1025, "buttons": [{"id": "a", "title": "A"}]}, "part.text"),
    ({"type": "list", "text": "Where?", "button": "x" * 21, "sections": [{"rows": [_ROW]}]}, "part.button"),
    ({"type": "list", "text": "Where?", "button": "Go", "sections": [{"title": "x" * 25, "rows": [_ROW]}]},
     "part.sections.0.title"),
    ({"type": "list", "text": "Where?", "button": "Go", "sections": [{"rows": [{"id": "r", "title": "x" * 25}]}]},
     "part.sections.0.rows.0.title"),
    ({"type": "list", "text": "Where?", "button": "Go",
      "sections": [{"rows": [{"id": "r", "title": "R", "description": "x" * 73}]}]}, "part.sections.0.rows.0.description"),
    ({"type": "list", "text": "Where?", "button": "Go", "sections": [
        {"title": "A", "rows": [{"id": f"a{i}", "title": "R"} for i in range(6)]},
        {"title": "B", "rows": [{"id": f"b{i}", "title": "R"} for i in range(5)]}]}, "part"),  # 11 rows in all
    ({"type": "list", "text": "Where?", "button": "Go", "sections": [{"rows": [_ROW]}, {"title": "B", "rows": [
        {"id": "s", "title": "S"}]}]}, "part"),  # two sections, one untitled
    ({"type": "list", "text": "Where?", "button": "Go", "sections": [{"title": "A", "rows": [_ROW]},
                                                                    {"title": "B", "rows": [_ROW]}]}, "part"),
    ({"type": "image", "link": "https://x/a.png", "caption": "x" * 1025}, "part.caption"),
    ({"type": "image", "caption": "no source"}, "part"),
    ({"type": "image", "link": "file:///etc/passwd"}, "part.link"),
    ({"type": "location", "latitude": 90.5, "longitude": 0}, "part.latitude"),
    ({"type": "location", "latitude": 0, "longitude": -181}, "part.longitude"),
    ({"type": "location", "latitude": "nan", "longitude": 0}, "part.latitude"),
    ({"type": "location_request", "text": " "}, "part.text"),
    ({"type": "reaction", "emoji": ""}, "part.emoji"),
    ({"type": "reaction", "emoji": "👍", "message_id": "x"}, "part.message_id"),
    ({"type": "image", "link": "http://example.com/a.png"}, "part.link"),  # https only
    ({"type": "reaction", "emoji": "lol"}, "part.emoji"),  # one emoji, not a word
    ({"type": "reaction", "emoji": "👍👍👍"}, "part.emoji"),  # one emoji, not three
    ({"type": "reaction", "emoji": "a"}, "part.emoji"),  # one grapheme, but no emoji
    ({"type": "buttons", "text": "Go?", "buttons": [{"id": " yes", "title": "Yes"}]}, "part.buttons.0.id"),
    ({"type": "buttons", "text": "Go?", "buttons": [{"id": "yes\n", "title": "Yes"}]}, "part.buttons.0.id"),
    ({"type": "list", "text": "Where?", "button": "Go", "sections": [{"rows": [{"id": "r ", "title": "R"}]}]},
     "part.sections.0.rows.0.id"),
    ({"type": "sticker"}, "part.type"),
    ("text", "part.type"),
])
def test_a_part_over_whatsapps_limits_is_refused_naming_the_field(part: Any, field: str) -> None:
    with pytest.raises(InvalidReplyPartError) as err:
        parse_part(part)
    assert err.value.field == field, str(err.value)


def test_the_limits_themselves_are_accepted() -> None:
    parse_parts([
        {"type": "buttons", "text": "x" * 1024, "buttons": [{"id": str(i), "title": f"{i}" * 20} for i in range(3)]},
        {"type": "list", "text": "Where?", "button": "x" * 20, "sections": [
            {"title": "x" * 24, "rows": [{"id": f"r{i}", "title": "x" * 24, "description": "x" * 72}
                                         for i in range(10)]}]},
        {"type": "location", "latitude": -90, "longitude": 180},
    ])


@pytest.mark.parametrize("emoji", ["👍", "❤", "❤️", "👍🏽", "🇫🇷", "1️⃣", "👨‍👩‍👧", "🏳️‍🌈", "©️"])
def test_a_reaction_of_one_emoji_with_its_modifiers_and_joiners_is_accepted(emoji: str) -> None:
    assert parse_part({"type": "reaction", "emoji": emoji}) == ReactionPart(type="reaction", emoji=emoji)


def test_ids_with_spaces_inside_are_accepted() -> None:
    part = parse_part({"type": "buttons", "text": "Go?", "buttons": [{"id": "go north", "title": "North"}]})
    assert isinstance(part, ButtonsPart) and part.buttons[0].id == "go north"


def _old_record_bytes(parts: list[str]) -> bytes:
    """A reply as a worker before rich replies wrote it (ReplyRecord.to_bytes of that version, spelled out)."""
    return msgpack.packb({"v": 1, "reply_id": "old1", "conversation_id": CID, "recipient": CID, "parts": parts,
                          "reply_to": "wamid.in", "created_at": NOW}, use_bin_type=True)


def test_a_record_written_before_rich_replies_reads_unchanged() -> None:
    record = decode_reply(_old_record_bytes(["one", "two"]))
    assert record.parts == ["one", "two"]
    assert record.to_bytes() == _old_record_bytes(["one", "two"])  # and a text-only reply is written as before


def test_a_record_written_before_rich_replies_still_delivers_after_an_upgrade() -> None:
    h = make_harness()
    raw(h.store).rpush(h.store.keys(CID).outbox, b"old1\n" + _old_record_bytes(["one", "two"]))
    h.service.deliver(CID)
    assert [(text, to) for _, text, to in h.channel.sent] == [("one", "wamid.in"), ("two", None)]


def test_a_rich_record_round_trips_through_the_outbox_bytes() -> None:
    record = ReplyRecord(reply_id="r", conversation_id=CID, recipient=CID, parts=[
        "Here:", LocationPart(type="location", latitude=51.5, longitude=-0.12, name="Big Ben"),
        ButtonsPart(type="buttons", text="Found it?", buttons=[{"id": "yes", "title": "Yes"}])])  # type: ignore[list-item]
    assert decode_reply(record.to_bytes()) == record


def test_whatsapp_sends_each_kind_in_order_inside_the_window(api: FakeWhatsApp) -> None:
    h = make_harness(channel=sender(api.base_url))
    h.client.send_message(CID, "hi", message_id="wamid.m1")
    h.client.send_message(CID, "are you there?", message_id="wamid.m2")
    h.client.send_message(CID, "from the game's own app", message_id="m3")  # not WhatsApp's: nothing to react to
    h.run()
    before = len(api.sent)
    h.client.send_operator_message(CID, "Look:", message_id="op1", parts=[
        {"type": "location", "latitude": 51.5007, "longitude": -0.1246, "name": "Big Ben"},
        {"type": "buttons", "text": "Found it?", "buttons": [{"id": "yes", "title": "Yes"}, {"id": "no", "title": "No"}]},
        {"type": "reaction", "emoji": "👍"}])
    h.run()
    bodies = [s["body"] for s in api.sent[before:]]
    # An operator's message answers no message of the player's: its reaction reacts to their latest WhatsApp
    # message; the other parts quote nothing.
    assert [b["type"] for b in bodies] == ["text", "location", "interactive", "reaction"]
    assert [b["biz_opaque_callback_data"] for b in bodies] == [f"{CID}|op1|{i}" for i in range(4)]
    assert bodies[2]["interactive"]["type"] == "button"
    assert bodies[3]["reaction"] == {"message_id": "wamid.m2", "emoji": "👍"}
    assert all("context" not in b for b in bodies)


def test_an_operators_reaction_with_no_whatsapp_message_to_react_to_goes_as_its_emoji(api: FakeWhatsApp) -> None:
    h = make_harness(channel=sender(api.base_url))
    h.client.send_message(CID, "hi", message_id="m1")  # a producer's id: not a message WhatsApp knows
    h.run()
    before = len(api.sent)
    h.client.send_operator_message(CID, "Nice", message_id="op1", parts=[{"type": "reaction", "emoji": "👍"}])
    h.run()
    assert [(b["type"], b.get("text", {}).get("body")) for b in (s["body"] for s in api.sent[before:])] == [
        ("text", "Nice"), ("text", "👍")]


def test_outside_the_window_interactive_parts_go_as_the_template(api: FakeWhatsApp) -> None:
    h = make_harness(channel=sender(api.base_url, Template("game_update")))
    h.client.send_operator_message(CID, "Look:", message_id="op1", parts=[
        {"type": "buttons", "text": "Found it?", "buttons": [{"id": "yes", "title": "Yes"}]}])
    h.run()  # no message from the player recorded: the window counts as closed
    [body] = [s["body"] for s in api.sent]
    assert body["type"] == "template"
    [param] = body["template"]["components"][0]["parameters"]
    assert param["text"] == "Look: Found it? [buttons: Yes]"


def test_the_state_keeps_the_parts_as_text() -> None:
    h = make_harness()
    h.client.send_operator_message(CID, "Look:", message_id="op1", parts=[
        {"type": "location", "latitude": 51.5, "longitude": -0.12, "name": "Big Ben"}])
    h.run()
    said = [m.content for m in decode_state(h.store.read_state(CID).blob).messages]
    texts = [t for _, t, _ in h.channel.sent]
    assert texts == ["Look:", render(LocationPart(type="location", latitude=51.5, longitude=-0.12, name="Big Ben"))]
    assert said[-2:] == texts


def test_the_console_prints_a_part_as_its_text() -> None:
    import io

    out = io.StringIO()
    h = make_harness(channel=ConsoleChannel(out))
    h.client.send_operator_message(CID, "Look:", message_id="op1", parts=[
        {"type": "buttons", "text": "Found it?", "buttons": [{"id": "yes", "title": "Yes"}]}])
    h.run()
    assert "[reply to 447700900123] Found it?\n[buttons: Yes]" in out.getvalue()


def test_the_generic_webhook_gets_the_text_and_the_part() -> None:
    got: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        got.append(json.loads(request.content))
        return httpx.Response(200, json={"id": f"x{len(got)}"})

    channel = WebhookChannel("http://hook.test/replies")
    channel._client = httpx.Client(transport=httpx.MockTransport(answer))
    h = make_harness(channel=channel)
    h.client.send_operator_message(CID, "Look:", message_id="op1", parts=[
        {"type": "location", "latitude": 51.5, "longitude": -0.12}])
    h.run()
    assert got[0] == {"recipient": CID, "text": "Look:", "reply_to": None}
    assert got[1]["part"] == {"type": "location", "latitude": 51.5, "longitude": -0.12}
    assert got[1]["text"] == "[location: (51.5, -0.12)]"


def test_renderings_say_what_the_player_saw() -> None:
    assert render("plain") == "plain"
    assert render(parse_part({"type": "list", "text": "Where?", "button": "Go", "sections": [{"rows": [
        {"id": "a", "title": "Big Ben", "description": "300 m"}]}]})) == "Where?\n[list Go: Big Ben (300 m)]"  # type: ignore[arg-type]
    assert render(parse_part({"type": "image", "link": "https://x/a.png", "caption": "Door"})) == "[image: Door]"  # type: ignore[arg-type]


def test_a_template_without_the_new_components_sends_as_before() -> None:
    assert Template("game_update").payload("Hi there") == {
        "name": "game_update", "language": {"code": "en_US"},
        "components": [{"type": "body", "parameters": [{"type": "text", "text": "Hi there"}]}]}
    assert Template("ping", parameter="none").payload("x") == {"name": "ping", "language": {"code": "en_US"}}


def test_a_template_gets_its_full_components() -> None:
    template = Template("next_clue", "en_GB", header_image="https://game.example/clues/7.jpg",
                        more_parameters=("Harrogate",), quick_replies=("HINT", "SKIP"))
    assert template.payload("Found it?\n[buttons: Yes]") == {
        "name": "next_clue", "language": {"code": "en_GB"}, "components": [
            {"type": "header", "parameters": [{"type": "image", "image": {"link": "https://game.example/clues/7.jpg"}}]},
            {"type": "body", "parameters": [{"type": "text", "text": "Found it? [buttons: Yes]"},
                                            {"type": "text", "text": "Harrogate"}]},
            {"type": "button", "sub_type": "quick_reply", "index": "0",
             "parameters": [{"type": "payload", "payload": "HINT"}]},
            {"type": "button", "sub_type": "quick_reply", "index": "1",
             "parameters": [{"type": "payload", "payload": "SKIP"}]}]}


def test_the_template_settings_reach_the_sender(monkeypatch: pytest.MonkeyPatch) -> None:
    from worker.runtime import service_window
    from worker.settings import Settings

    monkeypatch.setenv("PARLEY_WHATSAPP_TEMPLATE", "next_clue")
    monkeypatch.setenv("PARLEY_WHATSAPP_TEMPLATE_HEADER_IMAGE", "https://game.example/h.jpg")
    monkeypatch.setenv("PARLEY_WHATSAPP_TEMPLATE_MORE_PARAMETERS", '["Harrogate, North Yorkshire"]')
    monkeypatch.setenv("PARLEY_WHATSAPP_TEMPLATE_QUICK_REPLIES", "HINT, SKIP")
    template = service_window(Settings()).template
    assert template == Template("next_clue", header_image="https://game.example/h.jpg",
                                more_parameters=("Harrogate, North Yorkshire",), quick_replies=("HINT", "SKIP"))
