"""Every real WhatsApp payload gets its outcome, through the real Starlette app against the machine's Redis.

The outcome of every file in ``../shared/fixtures/whatsapp`` is written down in :data:`OUTCOMES`; a fixture
added without an entry fails :func:`test_every_fixture_has_an_expected_outcome`. Also here, against real Redis:
a full mailbox answers 503 and loses nothing; a deleted conversation is not brought back by Meta's retries.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any, Literal

import pytest
import redis
from starlette.testclient import TestClient

from tests.ingress.test_ingress import SECRET, VERIFY, meta_bytes, sign, text_value
from tests.support.redis_server import skip_or_fail
from tests.support.whatsapp_fixtures import fixture_names, fixture_payload, needs_fixtures
from worker.client import ConversationClient
from worker.envelopes.inputs import Envelope, Media, decode_envelope
from worker.ingress.app import create_app
from worker.ingress.parse import LocationAs

Outcome = Literal["turn", "event", "notice", "status", "ignored", "refused"]

#: What each fixture becomes. "refused": not a webhook at all (a send-API response posted to us): 400.
OUTCOMES: dict[str, Outcome] = {
    "inbound_button_quick_reply.json": "turn",
    "inbound_contacts_message.json": "notice",
    "inbound_image.json": "turn",
    "inbound_image_no_url_pywa.json": "turn",
    "inbound_interactive_button_reply.json": "turn",
    "inbound_interactive_list_reply.json": "turn",
    "inbound_location.json": "event",
    "inbound_multiple_changes_one_entry_netflie.json": "turn",
    "inbound_reaction.json": "event",
    "inbound_reaction_removed.json": "ignored",
    "inbound_reaction_removed_empty_emoji_pywa.json": "ignored",
    "inbound_system_identity_changed_pywa.json": "ignored",
    "inbound_system_user_changed_number.json": "ignored",
    "inbound_text.json": "turn",
    "inbound_text_bsuid_username_no_phone.json": "turn",
    "inbound_text_click_to_whatsapp_ad_referral.json": "turn",
    "inbound_text_contacts_without_profile_netflie.json": "turn",
    "inbound_text_dashboard_test_sample_in_the_wild.json": "turn",
    "inbound_text_forwarded_pywa.json": "turn",
    "inbound_text_message_business_button_context.json": "turn",
    "inbound_text_reply_context_pywa.json": "turn",
    "inbound_unknown_legacy_netflie.json": "notice",
    "inbound_unsupported.json": "notice",
    "send_error_100_in_the_wild.json": "refused",
    "send_error_130429.json": "refused",
    "send_error_131056_ycloud_wrapped.json": "refused",
    "send_error_190_expired_token_in_the_wild.json": "refused",
    "send_error_190_openapi.json": "refused",
    "send_error_4_openapi.json": "refused",
    "send_success_bsuid_recipient.json": "refused",
    "send_success_openapi_example.json": "refused",
    "send_success_template_message_status_accepted.json": "refused",
    "send_success_text.json": "refused",
    "status_delivered.json": "status",
    "status_delivered_bsuid.json": "status",
    "status_delivered_bsuid_no_phone.json": "status",
    "status_failed_130472_pywa.json": "status",
    "status_failed_131026_in_the_wild.json": "status",
    "status_failed_131047.json": "status",
    "status_failed_131049.json": "status",
    "status_read.json": "status",
    "status_read_pywa.json": "status",
    "status_sent.json": "status",
    "status_sent_v24_minimal.json": "status",
    "webhook_value_errors_130429.json": "ignored",
}
#: The summary counter each queued outcome moves.
COUNTER = {"turn": "accepted", "event": "events", "notice": "notices"}
FILES = fixture_names()
REPLY = "Sorry, I can only read text, locations and photos here."


class RedisRig:
    """The app over a client of the machine's Redis, under a key prefix of its own (deleted afterwards)."""

    def __init__(self, r: redis.Redis, *, location_as: LocationAs | None = "event", unsupported_reply: str = REPLY,
                 **settings: Any) -> None:
        self.r = r
        self.prefix = f"test{uuid.uuid4().hex[:12]}"
        self.woken: list[str] = []
        self.client = ConversationClient.from_url("redis://127.0.0.1:6379/0", key_prefix=self.prefix,
                                                  wake=self.woken.append, **settings)
        self.store = self.client.store
        # max_age_seconds=0: the fixtures keep the timestamps they were captured with, years ago (the age check
        # has its own tests in test_age.py).
        self.http = TestClient(create_app(self.client, self.store, app_secret=SECRET, verify_token=VERIFY,
                                          location_as=location_as, unsupported_reply=unsupported_reply,
                                          max_age_seconds=0))

    def post(self, payload: Any) -> Any:
        raw = meta_bytes(payload)
        return self.http.post("/webhook", content=raw, headers={"X-Hub-Signature-256": sign(raw)})

    def envelopes(self, cid: str) -> list[Envelope]:
        return [decode_envelope(p) for _, p in self.store.inbox(cid)]

    def inbox_keys(self) -> list[str]:
        return [k.decode() for k in self.r.scan_iter(match=f"{self.prefix}:*:inbox")]

    def cleanup(self) -> None:
        for key in self.r.scan_iter(match=f"{self.prefix}:*", count=1000):
            self.r.delete(key)


@pytest.fixture
def real_redis() -> Iterator[redis.Redis]:
    r = redis.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=0.5)
    try:
        r.ping()
    except redis.RedisError as exc:
        skip_or_fail(f"no redis-server answers at 127.0.0.1:6379 ({exc})")
    yield r
    r.close()


@pytest.fixture
def rig(real_redis: redis.Redis) -> Iterator[RedisRig]:
    rig = RedisRig(real_redis)
    yield rig
    rig.cleanup()


payload_of = fixture_payload


def first_message(payload: dict[str, Any]) -> dict[str, Any]:
    msg: dict[str, Any] = payload["entry"][0]["changes"][0]["value"]["messages"][0]
    return msg


def without_time(env: Envelope) -> dict[str, Any]:
    return env.model_dump(exclude={"accepted_at"}, exclude_none=True)


@needs_fixtures
def test_every_fixture_has_an_expected_outcome() -> None:
    assert sorted(OUTCOMES) == FILES, "classify every fixture in OUTCOMES (and drop entries for removed ones)"


@needs_fixtures
@pytest.mark.parametrize("name", FILES)
def test_every_fixture_gets_its_outcome(name: str, rig: RedisRig) -> None:
    payload = payload_of(name)
    expected = OUTCOMES.get(name)
    if expected is None:
        pytest.fail(f"new fixture {name}: give it an expected outcome in OUTCOMES")
    r = rig.post(payload)
    if expected == "refused":
        assert r.status_code == 400 and "malformed webhook body" in r.json()["error"]
        assert rig.inbox_keys() == [] and rig.woken == []
        return
    assert r.status_code == 200, r.text
    summary = r.json()
    assert set(summary) == {"accepted", "events", "notices", "duplicates", "statuses", "ignored"}

    if expected == "status":
        st = payload["entry"][0]["changes"][0]["value"]["statuses"][0]
        assert summary == {"accepted": 0, "events": 0, "notices": 0, "duplicates": 0, "statuses": 1, "ignored": 0}
        [recorded] = rig.store.statuses(st.get("recipient_id") or st["recipient_user_id"])
        assert (recorded.provider_id, recorded.status) == (st["id"], st["status"])
        assert rig.inbox_keys() == [] and rig.woken == []
    elif expected == "ignored":
        assert summary["ignored"] >= 1 and sum(summary.values()) == summary["ignored"]
        assert rig.inbox_keys() == [] and rig.woken == []
    else:
        msg = first_message(payload)
        cid = msg.get("from") or msg["from_user_id"]
        counter = COUNTER[expected]
        if name == "inbound_multiple_changes_one_entry_netflie.json":
            # Both changes walked; netflie's placeholder "wamid.ID" is shared, so the second is a duplicate.
            assert (summary[counter], summary["duplicates"]) == (1, 1)
        else:
            assert {k: v for k, v in summary.items() if v} == {counter: 1}
        [env] = rig.envelopes(cid)
        assert env.message_id == msg["id"] and env.conversation_id == cid
        assert rig.woken == [cid]
        if expected == "turn":
            # A tap's answer goes under the message whose button was tapped; anything else under the player's.
            tapped = msg.get("context", {}).get("id") if msg["type"] in ("interactive", "button") else None
            assert env.kind == "message" and env.reply_to == (tapped or msg["id"]) and env.recipient == cid
            assert (env.media is not None) == (msg["type"] == "image")
        elif expected == "event":
            assert env.kind == "event" and env.text and not env.pinned
            assert env.reply_to is None and env.recipient is None  # an event is never answered by itself
        else:
            assert env.kind == "notice" and env.text == REPLY
            assert env.reply_to == msg["id"] and env.recipient == cid

    # Meta's retry of the same body queues nothing new.
    depth = {k: rig.r.llen(k) for k in rig.inbox_keys()}
    again = rig.post(payload).json()
    queued = summary["accepted"] + summary["events"] + summary["notices"]
    assert again["accepted"] == again["events"] == again["notices"] == 0
    assert again["duplicates"] == queued + summary["duplicates"]
    assert {k: rig.r.llen(k) for k in rig.inbox_keys()} == depth


@needs_fixtures
def test_inbound_location_is_this_event(rig: RedisRig) -> None:
    assert rig.post(payload_of("inbound_location.json")).json()["events"] == 1
    [env] = rig.envelopes("16505551234")
    assert without_time(env) == {
        "v": 1, "kind": "event", "conversation_id": "16505551234",
        "message_id": "wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQUFERjg0NDEzNDdFODU3MUMxMAA=",
        "text": "The player shared their location: Philz Coffee, 101 Forest Ave, Palo Alto, CA 94301 "
                "(lat 37.44221, lon -122.16166)",
        "pinned": False, "from_player": True,  # the pin's name and address are the player's words (invariant 12)
        "sent_at": 1744344496,  # WhatsApp's timestamp: when the player sent it, the message's time in the state
    }


@needs_fixtures
def test_inbound_location_as_a_turn(real_redis: redis.Redis) -> None:
    rig = RedisRig(real_redis, location_as="turn")
    try:
        assert rig.post(payload_of("inbound_location.json")).json()["accepted"] == 1
        [env] = rig.envelopes("16505551234")
        wamid = "wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQUFERjg0NDEzNDdFODU3MUMxMAA="
        assert without_time(env) == {
            "v": 1, "kind": "message", "conversation_id": "16505551234", "message_id": wamid,
            "text": "The player shared their location: Philz Coffee, 101 Forest Ave, Palo Alto, CA 94301 "
                    "(lat 37.44221, lon -122.16166)",
            "pinned": False, "reply_to": wamid, "recipient": "16505551234", "sent_at": 1744344496,
        }
    finally:
        rig.cleanup()


@needs_fixtures
def test_inbound_image_is_this_turn(rig: RedisRig) -> None:
    assert rig.post(payload_of("inbound_image.json")).json()["accepted"] == 1
    [env] = rig.envelopes("16505551234")
    wamid = "wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA="
    assert without_time(env) == {
        "v": 1, "kind": "message", "conversation_id": "16505551234", "message_id": wamid, "text": "Taj Mahal",
        "pinned": False, "reply_to": wamid, "recipient": "16505551234",
        "media": {"kind": "image", "id": "1003383421387256", "mime_type": "image/jpeg",
                  "sha256": "SfInY0gGKTsJlUWbwxC1k+FAD0FZHvzwfpvO0zX0GUI="}, "sent_at": 1744344496,
    }


@needs_fixtures
def test_inbound_image_without_caption_or_url(rig: RedisRig) -> None:
    assert rig.post(payload_of("inbound_image_no_url_pywa.json")).json()["accepted"] == 1
    [env] = rig.envelopes("972987654321")
    assert env.kind == "message" and env.text is None and env.reply_to == "wamid.xyzxyz"
    assert env.media == Media(id="65463453", mime_type="image/jpeg", sha256="4654+8g=")


@needs_fixtures
def test_reaction_is_feedback_the_model_may_use(rig: RedisRig) -> None:
    payload = payload_of("inbound_reaction.json")
    first_message(payload)["reaction"]["emoji"] = "👎"
    assert rig.post(payload).json()["events"] == 1
    [env] = rig.envelopes("16505551234")
    assert env.text == ("The player reacted 👎 to your message "
                        "wamid.HBgLMTQxMjU1NTA4MjkVAgASGBQzQUNCNjk5RDUwNUZGMUZEM0VBRAA=")


def test_voice_note_gets_the_configured_short_answer_and_empty_means_none(real_redis: redis.Redis) -> None:
    voice = {"from": "447700900123", "id": "wamid.V1", "timestamp": "1", "type": "audio",
             "audio": {"id": "9", "mime_type": "audio/ogg; codecs=opus", "voice": True}}
    body = {"entry": [{"changes": [{"field": "messages", "value": {"messages": [voice]}}]}]}
    for reply, counter in (("Voice notes? Not yet: type it, please.", "notices"), ("", "ignored")):
        rig = RedisRig(real_redis, unsupported_reply=reply)
        try:
            summary = rig.post(body).json()
            assert {k: v for k, v in summary.items() if v} == {counter: 1}
            assert [e.text for e in rig.envelopes("447700900123")] == ([reply] if reply else [])
        finally:
            rig.cleanup()


def text_batch(*messages: tuple[str, str]) -> dict[str, Any]:
    """One POST with one change per (wamid, sender)."""
    return {"entry": [{"changes": [{"field": "messages", "value": text_value(wamid, sender, f"text {wamid}")}
                                   for wamid, sender in messages]}]}


def test_full_mailbox_answers_503_and_the_retry_loses_nothing(real_redis: redis.Redis) -> None:
    rig = RedisRig(real_redis, max_inbox=2)  # PARLEY_MAX_INBOX
    try:
        a, b = "447700900001", "447700900002"
        batch = text_batch(("wamid.A1", a), ("wamid.A2", a), ("wamid.A3", a), ("wamid.B1", b))
        r = rig.post(batch)
        assert r.status_code == 503
        assert r.json()["accepted"] == 3 and "mailbox is full" in r.json()["error"]
        # The rest of the batch was still applied: another player is not held up by a full mailbox.
        assert [e.message_id for e in rig.envelopes(a)] == ["wamid.A1", "wamid.A2"]
        assert [e.message_id for e in rig.envelopes(b)] == ["wamid.B1"]
        assert rig.post(batch).status_code == 503  # still full: Meta keeps retrying
        rig.r.lpop(rig.store.keys(a).inbox)  # a worker applied A1
        r = rig.post(batch)
        assert r.status_code == 200
        assert r.json() == {"accepted": 1, "events": 0, "notices": 0, "duplicates": 3, "statuses": 0, "ignored": 0}
        assert [e.message_id for e in rig.envelopes(a)] == ["wamid.A2", "wamid.A3"]
    finally:
        rig.cleanup()
def test_a_deleted_conversation_is_not_brought_back_by_meta_retries(rig: RedisRig) -> None:
    cid = "447700900123"
    old = text_batch(("wamid.OLD1", cid), ("wamid.OLD2", cid))
    assert rig.post(old).json()["accepted"] == 2
    rig.client.delete(cid)
    assert rig.envelopes(cid) == []
    again = rig.post(old)  # Meta retries a webhook for about 36 hours
    assert again.status_code == 200 and again.json()["duplicates"] == 2 and again.json()["accepted"] == 0
    assert rig.envelopes(cid) == []
    assert rig.post(text_batch(("wamid.NEW1", cid))).json()["accepted"] == 1  # a new message starts afresh
    assert [e.message_id for e in rig.envelopes(cid)] == ["wamid.NEW1"]
