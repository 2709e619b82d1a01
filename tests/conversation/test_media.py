"""Photos in the core: the media reference on a user message, its codec (reference only, version rules), token
counts, transcripts, and a turn that carries attachments into every request."""

from __future__ import annotations

import pathlib
from dataclasses import replace

import msgpack
import pytest

from worker.conversation import messages as msgs
from worker.conversation.bounded import encode_bounded
from worker.conversation.chat import Chat
from worker.conversation.compaction import _render_transcript
from worker.conversation.history import repair_history
from worker.conversation.inspect import inspect_state
from worker.conversation.messages import MediaRef, Message
from worker.conversation.model import Attachment
from worker.conversation.scripted import Reply, ScriptedModel
from worker.conversation.state import (
    FORMAT_VERSION,
    MAGIC,
    ConversationState,
    decode_state,
    encode_state,
    encode_with_memo,
    load_state,
)
from worker.conversation.tokens import IMAGE_TOKENS, EstimateCounter
from worker.conversation.tools import Tool
from worker.errors import InputError, InvalidMessageError

GOLDEN = pathlib.Path(__file__).parent / "golden"
PHOTO = MediaRef(id="wamedia.1", mime_type="image/jpeg")
JPEG = Attachment("image/jpeg", b"\xff\xd8\xff\xe0 not really a jpeg")


def test_user_message_with_media_may_have_an_empty_caption() -> None:
    m = msgs.user("", media=PHOTO)
    assert m.media == PHOTO and m.content == ""
    with pytest.raises(InvalidMessageError):
        msgs.user("")  # no photo, no text: still refused


@pytest.mark.parametrize("bad", [
    Message(role="event", content="x", media=PHOTO),
    Message(role="user", content="", media=MediaRef(id="")),
    Message(role="user", content="", media=MediaRef(id="x", kind="video")),  # type: ignore[arg-type]
])
def test_bad_media_is_refused(bad: Message) -> None:
    with pytest.raises(InvalidMessageError):
        msgs.validated(bad)


def test_the_state_keeps_the_reference_and_round_trips() -> None:
    s = ConversationState.fresh("openai").append(msgs.user("look", media=PHOTO), Message(role="assistant", content="ok"))
    blob = encode_state(s)
    assert blob[3] == FORMAT_VERSION and decode_state(blob) == s
    assert b"wamedia.1" in blob and JPEG.data not in blob


def test_every_state_is_written_in_the_current_format() -> None:
    # Since frames (issue 33) a state of the previous release's format cannot be appended to: every write is the
    # current version (6: each message's time) unless told the previous one (5: the preamble's facts and runs, while
    # workers of the release before share the states), which an older release refuses ("version") rather than
    # misreading a run as a frame or reading a state without its appended turns.
    s = ConversationState.fresh("openai").append(msgs.user("hi"), Message(role="assistant", content="ok"))
    assert encode_state(s)[3] == 6 and encode_state(s, version=5)[3] == 5
    assert FORMAT_VERSION == 6


def test_golden_v2_with_photos_decodes() -> None:
    s = decode_state((GOLDEN / "v2_media.bin").read_bytes())
    assert [m.media for m in s.messages] == [MediaRef("1234567890", "image/jpeg"), None,
                                             MediaRef("998877", "image/png"), None]
    assert s.messages[0].content == "" and s.messages[2].content == "Is this the stage door?"


@pytest.mark.parametrize("md", [["image", "1", None, "x"], ["video", "1", None], ["image", "", None], "1"])
def test_bad_media_in_a_blob_is_invalid(md: object) -> None:
    payload = {"p": "openai", "m": [{"r": "user", "s": 1, "md": md}], "ns": 2}
    problem = load_state(MAGIC + bytes([2, 0]) + msgpack.packb(payload), provider="openai").problem
    assert problem is not None and problem.reason == "invalid"


def test_media_on_a_non_user_message_in_a_blob_is_invalid() -> None:
    payload = {"p": "openai", "m": [{"r": "event", "s": 1, "c": "x", "md": ["image", "1", None]}], "ns": 2}
    problem = load_state(MAGIC + bytes([2, 0]) + msgpack.packb(payload), provider="openai").problem
    assert problem is not None and problem.reason == "invalid"


def test_an_image_counts_a_fixed_estimate() -> None:
    counter = EstimateCounter()
    plain, photo = msgs.user("abcd"), msgs.user("abcd", media=PHOTO)
    assert counter.count_message(photo) - counter.count_message(plain) == IMAGE_TOKENS == 1000


def test_transcripts_show_the_photo_and_its_caption() -> None:
    text = _render_transcript([msgs.user("the stage door", media=PHOTO), msgs.user("", media=PHOTO)])
    assert text.splitlines() == ["User: [photo] the stage door", "User: [photo]"]
    assert msgs.unseen_media_text(msgs.user(" hi ", media=PHOTO)) == "[The player sent a photo] hi"
    assert msgs.unseen_media_text(msgs.user("", media=PHOTO)) == "[The player sent a photo]"


def test_repair_keeps_a_photo_without_caption_and_slimming_keeps_the_reference() -> None:
    photo = msgs.user("", media=PHOTO).with_seq(1)
    assert repair_history([photo])[0] == [photo]
    s = ConversationState.fresh("openai").append(photo, Message(role="assistant", content="x" * 5000))
    slim = decode_state(encode_bounded(s, max_bytes=600, max_pinned=5).blob)
    assert slim.messages[0].media == PHOTO


def test_inspect_shows_the_reference() -> None:
    s = ConversationState.fresh("openai").append(msgs.user("", media=PHOTO))
    assert inspect_state(encode_state(s))["history"][0]["media"] == {"kind": "image", "id": "wamedia.1",
                                                                      "mime_type": "image/jpeg"}


def test_a_turn_sends_the_attachments_with_every_request_and_stores_only_the_reference() -> None:
    model = ScriptedModel([Reply(tool_calls=(("where", {}),)), "It is the theatre."], reads_images=True)
    where = Tool(name="where", description="d", parameters={"type": "object", "properties": {}},
                 handler=lambda: "Harrogate")
    chat = Chat(model=model, tools=[where])
    result = chat.run_turn(None, system="s", user=msgs.user("what is this?", media=PHOTO),
                           attachments={PHOTO.id: JPEG})
    assert result.reply == "It is the theatre."
    assert len(model.requests) == 2 and all(r.attachments == {PHOTO.id: JPEG} for r in model.requests)
    assert model.requests[0].messages[-1].media == PHOTO
    stored = decode_state(result.state)
    assert stored.messages[0].media == PHOTO and JPEG.data not in result.state
    # The next turn has no attachments: the photo stays in the history as a reference.
    chat.run_turn(result.state, user="and now?")
    assert model.requests[-1].attachments == {} and model.requests[-1].messages[0].media == PHOTO


def test_burst_messages_may_carry_photos() -> None:
    # The drain passes the earlier messages of a burst in ``messages`` and the last one as ``user``.
    model = ScriptedModel(reads_images=True)
    chat = Chat(model=model)
    other = MediaRef(id="wamedia.2", mime_type="image/png")
    chat.run_turn(None, messages=[msgs.user("", media=other), msgs.event("Player at the theatre")],
                  user=msgs.user("", media=PHOTO), attachments={PHOTO.id: JPEG, other.id: JPEG})
    sent = model.requests[0].messages
    assert [m.media for m in sent] == [other, None, PHOTO]


@pytest.mark.parametrize("user", [Message(role="event", content="x"), msgs.user("x" * 20)])
def test_a_bad_user_message_is_refused(user: Message) -> None:
    chat = Chat(model=ScriptedModel(), max_input_chars=10)
    with pytest.raises(InputError):
        chat.run_turn(None, user=user)


def test_attachments_must_be_attachments() -> None:
    with pytest.raises(InvalidMessageError):
        Chat(model=ScriptedModel()).run_turn(None, user="hi", attachments={"x": b"raw"})  # type: ignore[dict-item]


def test_photos_ride_in_appended_frames() -> None:
    """A photo added after a stored state is in the frame the write appends, and survives decoding; a pinned one
    (a change of the pinned items) makes the write whole."""
    plain = ConversationState.fresh("openai").append(msgs.user("hi"), Message(role="assistant", content="ok"))
    blob, memo = encode_with_memo(plain)
    with_photo = plain.append(msgs.user("look", media=PHOTO))
    grown, memo = encode_with_memo(with_photo, memo)
    assert memo.written_from == len(blob) and decode_state(grown) == with_photo
    pinned = replace(with_photo, pinned=(msgs.user("keep", media=PHOTO).with_seq(4),), next_seq=5)
    whole, memo = encode_with_memo(pinned, memo)
    assert memo.written_from == 0 and decode_state(whole) == pinned
