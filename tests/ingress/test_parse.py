"""The pure webhook parser: identities, record kinds, odd shapes, signatures and the handshake."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.envelopes.addresses import validate_conversation_id
from worker.envelopes.inputs import Media, parse_part_callback, part_callback
from worker.ingress.parse import (
    InboundEvent,
    InboundMessage,
    InboundNotice,
    StatusUpdate,
    Unsupported,
    location_text,
    parse_webhook,
    reaction_text,
    verify_handshake,
    verify_signature,
)


def body(value: dict[str, Any], field: str = "messages") -> dict[str, Any]:
    return {"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [{"field": field, "value": value}]}]}


def msg(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"id": "wamid.M", "timestamp": "1700000000", "type": "text", "text": {"body": "hi"}}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


# --- identity ------------------------------------------------------------------------------------------

def test_phone_is_the_conversation_id_and_the_recipient() -> None:
    [rec] = parse_webhook(body({"contacts": [{"wa_id": "447700900123", "user_id": "GB.123"}],
                                "messages": [msg(**{"from": "447700900123", "from_user_id": "GB.123"})]}))
    assert isinstance(rec, InboundMessage)
    assert rec.conversation_id == rec.sender == "447700900123"
    assert rec.user_id == "GB.123" and rec.text == "hi" and rec.type == "text" and rec.timestamp == "1700000000"


def test_bsuid_when_there_is_no_phone() -> None:
    [rec] = parse_webhook(body({"contacts": [{"user_id": "US.134"}], "messages": [msg(from_user_id="US.134")]}))
    assert isinstance(rec, InboundMessage) and rec.conversation_id == rec.sender == "US.134"


def test_phone_of_the_matching_contact_beats_the_bsuid() -> None:
    contacts = [{"wa_id": "111", "user_id": "US.1"}, {"wa_id": "222", "user_id": "US.2"}]
    [rec] = parse_webhook(body({"contacts": contacts, "messages": [msg(from_user_id="US.2")]}))
    assert isinstance(rec, InboundMessage) and rec.conversation_id == "222" and rec.user_id == "US.2"


def test_contacts_are_not_guessed_in_a_batch_of_several() -> None:
    contacts = [{"wa_id": "111"}, {"wa_id": "222"}]
    [rec] = parse_webhook(body({"contacts": contacts, "messages": [msg()]}))
    assert isinstance(rec, Unsupported) and "no sender" in rec.reason


def test_single_contact_supplies_a_missing_sender() -> None:
    [rec] = parse_webhook(body({"contacts": [{"wa_id": "+447700900123"}], "messages": [msg()]}))
    assert isinstance(rec, InboundMessage) and rec.conversation_id == "447700900123"


@pytest.mark.parametrize("sender", ["44 7700 900123", "a:b", "x" * 200, "ünïcode", "{tag}", "*"])
def test_invalid_conversation_id_is_skipped_and_reported(sender: str) -> None:
    [rec] = parse_webhook(body({"messages": [msg(**{"from": sender, "from_user_id": "US.1"})]}))
    assert isinstance(rec, Unsupported) and rec.wamid == "wamid.M"
    assert rec.reason.startswith("invalid conversation id")  # no silent fallback to the BSUID


def test_status_identity_order() -> None:
    recs = parse_webhook(body({"statuses": [
        {"id": "w1", "status": "sent", "recipient_id": "447700900123", "recipient_user_id": "US.1"},
        {"id": "w2", "status": "read", "recipient_user_id": "US.1"},
        {"id": "w3", "status": "delivered"},
    ]}))
    assert [getattr(r, "conversation_id", None) for r in recs] == ["447700900123", "US.1", None]
    assert isinstance(recs[2], Unsupported)


# --- message kinds ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("m", "text"), [
    (msg(type="button", text=None, button={"payload": "P", "text": "Yes please"}),
     '[tapped the button "Yes please" (payload "P")]'),
    (msg(type="button", text=None, button={"payload": "P"}), '[tapped the button (payload "P")]'),
    (msg(type="interactive", text=None,
         interactive={"type": "button_reply", "button_reply": {"id": "b1", "title": "Tap"}}),
     '[tapped the button "Tap" (id "b1")]'),
    (msg(type="interactive", text=None,
         interactive={"type": "list_reply", "list_reply": {"id": "l1", "title": "Row", "description": "d"}}),
     '[chose the list row "Row" (id "l1"): "d"]'),
])
def test_replies_become_turns(m: dict[str, Any], text: str) -> None:
    m["from"] = "447700900123"
    [rec] = parse_webhook(body({"messages": [m]}))
    assert isinstance(rec, InboundMessage) and rec.text == text


@pytest.mark.parametrize(("m", "outcome", "kind"), [
    (msg(type="image", text=None, image={"id": "1"}), InboundMessage, "image"),
    (msg(type="reaction", text=None, reaction={"message_id": "x", "emoji": "👍"}), InboundEvent, "reaction"),
    (msg(type="location", text=None, location={"latitude": 1, "longitude": 2}), InboundMessage, "location"),
    (msg(type="system", text=None, system={"body": "changed"}), Unsupported, "system"),
    (msg(type="reaction", text=None, reaction={"message_id": "x"}), Unsupported, "reaction"),
    (msg(type="reaction", text=None, reaction={"message_id": "x", "emoji": ""}), Unsupported, "reaction"),
    (msg(type="unsupported", text=None, errors=[{"code": 131051, "title": "Message type unknown"}]),
     InboundNotice, "unsupported"),
    (msg(type="unsupported", text=None, unsupported={"type": "poll_creation"}), InboundNotice,
     "unsupported:poll_creation"),
    (msg(type="unknown", text=None), InboundNotice, "unknown"),
    (msg(type="audio", text=None, audio={"id": "a", "voice": True}), InboundNotice, "audio:voice"),
    (msg(type="audio", text=None, audio={"id": "a"}), InboundNotice, "audio"),
    (msg(type="video", text=None, video={"id": "v"}), InboundNotice, "video"),
    (msg(type="document", text=None, document={"id": "d"}), InboundNotice, "document"),
    (msg(type="sticker", text=None, sticker={"id": "s"}), InboundNotice, "sticker"),
    (msg(type="contacts", text=None, contacts=[{"name": {"formatted_name": "B"}}]), InboundNotice, "contacts"),
    (msg(type="interactive", text=None, interactive={"type": "nfm_reply", "nfm_reply": {"response_json": "{}"}}),
     InboundNotice, "interactive:nfm_reply"),
    (msg(type="brand_new_type", text=None), InboundNotice, "brand_new_type"),
    (msg(type=None), InboundNotice, "unknown"),
    (msg(type="image", text=None, image={}), InboundNotice, "image"),  # nothing to fetch, nothing said
    (msg(type="location", text=None, location={"latitude": "north"}), InboundNotice, "location"),
    (msg(type="text", text={"body": ""}), Unsupported, "text"),  # malformed: nothing was said
    (msg(type="text", text="not an object"), Unsupported, "text"),
    (msg(type="button", text=None, button={}), Unsupported, "button"),
])
def test_every_message_type_has_an_outcome(m: dict[str, Any], outcome: type, kind: str) -> None:
    m["from"] = "447700900123"
    [rec] = parse_webhook(body({"messages": [m]}))
    assert type(rec) is outcome and rec.wamid == "wamid.M"
    assert (rec.kind if isinstance(rec, Unsupported) else rec.type) == kind
    if isinstance(rec, InboundNotice):
        assert rec.conversation_id == rec.sender == "447700900123"


def test_location_text_leaves_out_what_the_pin_lacks() -> None:
    full = {"name": "Harrogate Theatre", "address": "Oxford St, Harrogate", "latitude": 53.99281, "longitude": -1.5403}
    assert location_text(full) == ("The player shared their location: Harrogate Theatre, Oxford St, Harrogate "
                                   "(lat 53.99281, lon -1.5403)")
    assert location_text({"latitude": 53.99, "longitude": -1.54}) == \
        "The player shared their location: lat 53.99, lon -1.54"
    assert location_text({"name": "Pump Room", "latitude": True, "longitude": 1}) == \
        "The player shared their location: Pump Room"
    assert location_text({"address": "1 High St", "latitude": "53.5", "longitude": "-1.25"}) == \
        "The player shared their location: 1 High St (lat 53.5, lon -1.25)"
    assert location_text({"latitude": 200, "longitude": 0}) is None  # off the globe, and nothing else
    assert location_text({}) is None


def test_location_as_turn_is_a_chat_turn_threaded_to_the_pin() -> None:
    m = msg(**{"from": "447700900123", "type": "location", "text": None,
               "location": {"name": "Pump Room", "latitude": 53.99, "longitude": -1.54}})
    [event] = parse_webhook(body({"messages": [m]}), location_as="event")
    [turn] = parse_webhook(body({"messages": [m]}))  # a turn by default
    assert isinstance(event, InboundEvent) and isinstance(turn, InboundMessage)
    assert turn.text == event.text == "The player shared their location: Pump Room (lat 53.99, lon -1.54)"
    assert turn.sender == "447700900123" and turn.media is None


def test_image_carries_its_media_and_caption() -> None:
    image = {"id": "1003", "mime_type": "image/jpeg", "sha256": "abc=", "caption": "Taj", "url": "https://x"}
    [rec] = parse_webhook(body({"messages": [msg(**{"from": "1", "type": "image", "text": None, "image": image})]}))
    assert isinstance(rec, InboundMessage) and rec.text == "Taj"
    assert rec.media == Media(id="1003", mime_type="image/jpeg", sha256="abc=")
    no_caption = {"id": "1003"}
    [rec] = parse_webhook(body({"messages": [msg(**{"from": "1", "type": "image", "text": None,
                                                    "image": no_caption})]}))
    assert isinstance(rec, InboundMessage) and rec.text == "" and rec.media == Media(id="1003")
    caption_only = {"id": "x" * 1000, "caption": "look"}  # an id no media endpoint has: the words still count
    [rec] = parse_webhook(body({"messages": [msg(**{"from": "1", "type": "image", "text": None,
                                                    "image": caption_only})]}))
    assert isinstance(rec, InboundMessage) and rec.text == "look" and rec.media is None


def test_reaction_text() -> None:
    assert reaction_text({"message_id": "wamid.OURS", "emoji": "👎"}) == \
        "The player reacted 👎 to your message wamid.OURS"
    assert reaction_text({"emoji": "👎"}) == "The player reacted 👎"
    assert reaction_text({"message_id": "wamid.OURS"}) is None
    assert reaction_text({"message_id": "wamid.OURS", "emoji": " "}) is None


def test_reply_context_and_integer_timestamp() -> None:
    [rec] = parse_webhook(body({"messages": [msg(**{"from": "1", "timestamp": 1669233778,
                                                    "context": {"from": "15550783881", "id": "wamid.OURS"}})]}))
    assert isinstance(rec, InboundMessage) and rec.reply_to == "wamid.OURS" and rec.timestamp == "1669233778"


def test_forwarded_context_without_id_is_no_reply_to() -> None:
    [rec] = parse_webhook(body({"messages": [msg(**{"from": "1", "context": {"forwarded": True}})]}))
    assert isinstance(rec, InboundMessage) and rec.reply_to is None


def test_status_errors_are_kept_in_both_shapes() -> None:
    [new, old] = parse_webhook(body({"statuses": [
        {"id": "a", "status": "failed", "recipient_id": "1",
         "errors": [{"code": 131049, "title": "Not delivered", "message": "Not delivered",
                     "error_data": {"details": "to maintain healthy ecosystem engagement"}}]},
        {"id": "b", "status": "failed", "recipient_id": "1", "errors": [{"code": "131047", "title": "Re-engage"}]},
    ]}))
    assert isinstance(new, StatusUpdate) and isinstance(old, StatusUpdate)
    assert new.errors == [(131049, "Not delivered (to maintain healthy ecosystem engagement)")]
    assert old.errors == [(131047, "Re-engage")]
    assert new.detail() == "131049: Not delivered (to maintain healthy ecosystem engagement)"


def test_account_errors_and_other_fields_are_reported_not_dropped() -> None:
    recs = parse_webhook({"entry": [{"changes": [
        {"field": "messages", "value": {"errors": [{"code": 130429, "title": "Rate limit hit"}]}},
        {"field": "account_update", "value": {"event": "VERIFIED_ACCOUNT"}},
    ]}]})
    assert [r.kind for r in recs if isinstance(r, Unsupported)] == ["errors", "change:account_update"]


def test_batch_order_is_kept() -> None:
    recs = parse_webhook({"entry": [
        {"changes": [{"value": {"messages": [msg(id="w1", **{"from": "1"}), msg(id="w2", **{"from": "2"})],
                                "statuses": [{"id": "s1", "status": "sent", "recipient_id": "1"}]}}]},
        {"changes": [{"value": {"messages": [msg(id="w3", **{"from": "1"})]}}]},
    ]})
    assert [r.wamid for r in recs] == ["w1", "w2", "s1", "w3"]


@pytest.mark.parametrize("bad", [None, [], "x", 1, {}, {"entry": None}, {"entry": {}}, {"entries": []}])
def test_not_a_webhook_is_a_value_error(bad: Any) -> None:
    with pytest.raises(ValueError, match="not a WhatsApp webhook body"):
        parse_webhook(bad)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
    | st.sampled_from(["text", "button", "interactive", "button_reply", "list_reply", "447700900123", "US.1"]),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["entry", "changes", "value", "messages", "statuses", "contacts", "from",
                                        "id", "type", "text", "body", "button", "interactive", "title", "errors",
                                        "code", "recipient_id", "user_id", "wa_id", "from_user_id", "context",
                                        "status", "error_data", "details", "field", "timestamp"]),
                      children, max_size=6),
    max_leaves=40)


@settings(max_examples=400, deadline=None)
@given(entry=st.lists(json_values, max_size=4))
def test_never_crashes_on_unknown_shapes(entry: list[Any]) -> None:
    for rec in parse_webhook({"entry": entry}):
        if isinstance(rec, InboundMessage | StatusUpdate):
            assert validate_conversation_id(rec.conversation_id) == rec.conversation_id


# --- signature and handshake ---------------------------------------------------------------------------

def _sig(raw: bytes, secret: str = "s3cret") -> str:
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


def test_verify_signature() -> None:
    raw = b'{"entry":[],"x":"\\u00e4\\u00f6\\u00e5"}'
    assert verify_signature(raw, _sig(raw), "s3cret")
    assert verify_signature(raw, "  " + _sig(raw).upper().replace("SHA256", "sha256") + " ", "s3cret")
    assert not verify_signature(raw, _sig(raw, "other"), "s3cret")
    assert not verify_signature(raw + b" ", _sig(raw), "s3cret")
    assert not verify_signature('{"entry":[],"x":"äöå"}'.encode(), _sig(raw), "s3cret")
    assert not verify_signature(raw, _sig(raw)[len("sha256="):], "s3cret")
    assert not verify_signature(raw, None, "s3cret")
    assert not verify_signature(raw, "sha256=ünïcode", "s3cret")
    assert not verify_signature(raw, _sig(raw, ""), "")  # no secret configured: refuse


def test_verify_handshake() -> None:
    assert verify_handshake("subscribe", "vt", "1158201444", "vt") == "1158201444"
    assert verify_handshake("subscribe", "vt", "", "vt") == ""
    assert verify_handshake("subscribe", "nope", "1", "vt") is None
    assert verify_handshake("unsubscribe", "vt", "1", "vt") is None
    assert verify_handshake("subscribe", None, "1", "vt") is None
    assert verify_handshake("subscribe", "vt", None, "vt") is None
    assert verify_handshake("subscribe", "", "1", "") is None
    assert verify_handshake("subscribe", "ünï", "1", "vt") is None


@pytest.mark.parametrize(("data", "ref"), [
    ("447700900123|wamid.in1|0", ("447700900123", "wamid.in1", 0)),
    ("US.13491208655302741918|a|b|12", ("US.13491208655302741918", "a|b", 12)),  # a reply id may hold "|"
    (part_callback("447700900123", "r" * 256, 99), ("447700900123", "r" * 256, 99)),
    ('{"source":"api","uuid":"fuif"}', None), ("447700900123|wamid.in1", None), ("447700900123||0", None),
    ("bad:id|r|0", None), ("447700900123|r|x", None), ("447700900123|r|²", None), ("a|" + "r" * 600 + "|0", None),
    (None, None), (5, None),
])
def test_callback_data_names_a_reply_part_or_nothing(data: object, ref: tuple[str, str, int] | None) -> None:
    parsed = parse_part_callback(data)
    assert (None if parsed is None else (parsed.conversation_id, parsed.reply_id, parsed.part)) == ref


def test_a_reply_id_too_long_for_the_field_sends_no_callback_data() -> None:
    assert part_callback("447700900123", "r" * 500, 0) is None


@pytest.mark.parametrize("bad", ["..", ".", "1\n", "../../me/accounts", "1/../..", "1?fields=access_token", "1#",
                                 "1%2F..", " 1", "a:b", "1" * 129])
def test_an_image_whose_id_is_not_a_media_id_is_never_queued_with_it(bad: str) -> None:
    """The id would become part of a URL that carries the access token: checked before it is queued. With a
    caption the words are still the player's (no photo); without one the player gets the short answer, and the
    record says why (the ingress logs it and counts it with the notices)."""
    with_caption = {"id": bad, "caption": "look"}
    [rec] = parse_webhook(body({"messages": [msg(**{"from": "1", "type": "image", "text": None,
                                                    "image": with_caption})]}))
    assert isinstance(rec, InboundMessage) and rec.text == "look" and rec.media is None
    [rec] = parse_webhook(body({"messages": [msg(**{"from": "1", "type": "image", "text": None,
                                                    "image": {"id": bad}})]}))
    assert isinstance(rec, InboundNotice) and rec.type == "image:bad_media_id" and "invalid media id" in rec.reason
