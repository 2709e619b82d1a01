"""One player, whatever id a webhook names them by (WhatsApp's 2026 business-scoped user ids), through the webhook
app against a redis-server of the test's own: a phone-keyed player whose later webhooks carry only the BSUID stays in
one conversation, ``user_changed_user_id`` and number changes move the link, two conversations of one player are
never merged (the older stays), producers name the player by either id, a delete forgets the links, and Meta's
``user_preferences`` marketing opt-out is recorded.

The webhook shapes are built from Meta's description of the Cloud API (business-scoped user ids: ``from_user_id``,
``contacts[].user_id``, ``recipient_user_id``; the system messages ``user_changed_number`` (and the older
``customer_changed_number`` with ``new_wa_id``) and ``user_changed_user_id``; the ``user_preferences`` field), as
Meta's BSUID and webhook reference pages show them; ``user_changed_number`` is also in the OpenAPI description under
/work/shared/fixtures/whatsapp/meta-openapi/ (its "System Message" example).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY
from starlette.testclient import TestClient

from tests.ingress.test_ingress import SECRET, VERIFY, meta_bytes, sign
from tests.support.redis_server import RedisServer, redis_of_its_own
from worker.client import ConversationClient
from worker.envelopes.inputs import decode_envelope
from worker.ingress.app import create_app
from worker.ingress.parse import IdentityChange, InboundMessage, MarketingPreference, StatusUpdate, parse_webhook

PHONE = "16505551234"
NEW_PHONE = "12195555358"
BSUID = "US.13491208655302741918"
NEW_BSUID = "US.99991208655302741918"
NOW = str(int(time.time()))

server = pytest.fixture(redis_of_its_own)


def change(value: dict[str, Any], field: str = "messages") -> dict[str, Any]:
    value = {"messaging_product": "whatsapp",
             "metadata": {"display_phone_number": "15550783881", "phone_number_id": "106540352242922"}, **value}
    return {"object": "whatsapp_business_account",
            "entry": [{"id": "102290129340398", "changes": [{"value": value, "field": field}]}]}


def text(wamid: str, body: str, *, phone: str | None = None, user_id: str | None = None) -> dict[str, Any]:
    """A text message as Meta sends it since BSUIDs: ``from`` and ``wa_id`` only when the player has no username
    (or shares the number), ``from_user_id`` and ``contacts[].user_id`` always."""
    contact: dict[str, Any] = {"profile": {"name": "Sheena Nelson"}}
    msg: dict[str, Any] = {"id": wamid, "timestamp": NOW, "type": "text", "text": {"body": body}}
    if phone:
        contact["wa_id"], msg["from"] = phone, phone
    if user_id:
        contact["user_id"], msg["from_user_id"] = user_id, user_id
        contact["parent_user_id"] = msg["from_parent_user_id"] = "US.ENT.11815799212886844830"
    return change({"contacts": [contact], "messages": [msg]})


def user_id_changed(wamid: str, old: str, new: str) -> dict[str, Any]:
    """The system message of a player whose business-scoped user id changed (``user_changed_user_id``)."""
    return change({"contacts": [{"profile": {"name": "Sheena Nelson"}, "user_id": old}],
                   "messages": [{"from_user_id": old, "id": wamid, "timestamp": NOW, "type": "system",
                                 "system": {"body": f"User Sheena Nelson changed from {old} to {new}",
                                            "user_id": new, "type": "user_changed_user_id"}}]})


def number_changed(wamid: str, old: str, new: str, *, older_shape: bool = False) -> dict[str, Any]:
    """``user_changed_number`` as the OpenAPI description's example (no contacts); ``older_shape``: the earlier
    ``customer_changed_number`` with ``new_wa_id``."""
    system = ({"body": f"NAME changed from {old} to {new}", "new_wa_id": new, "type": "customer_changed_number"}
              if older_shape else
              {"body": f"User Sheena Nelson changed from {old} to {new}", "wa_id": new, "type": "user_changed_number"})
    return change({"messages": [{"from": old, "id": wamid, "timestamp": NOW, "type": "system", "system": system}]})


def preference(value: str, *, phone: str | None = PHONE, user_id: str | None = None) -> dict[str, Any]:
    """Meta's ``user_preferences`` webhook: the player stopped (or resumed) marketing messages."""
    pref: dict[str, Any] = {"detail": "User requested to stop marketing messages", "category": "marketing_messages",
                            "value": value, "timestamp": int(NOW)}
    contact: dict[str, Any] = {"profile": {"name": "Sheena Nelson"}}
    if phone:
        pref["wa_id"] = contact["wa_id"] = phone
    if user_id:
        pref["user_id"] = contact["user_id"] = user_id
    return change({"contacts": [contact], "user_preferences": [pref]}, field="user_preferences")


class Rig:
    """The webhook app over a client of the test's own redis-server."""

    def __init__(self, server: RedisServer) -> None:
        self.woken: list[str] = []
        self.client = ConversationClient.from_url(server.url, key_prefix=f"id{uuid.uuid4().hex[:8]}",
                                                  wake=self.woken.append)
        self.store = self.client.store
        self.http = TestClient(create_app(self.client, self.store, app_secret=SECRET, verify_token=VERIFY,
                                          max_age_seconds=0))

    def post(self, payload: dict[str, Any]) -> dict[str, Any]:
        raw = meta_bytes(payload)
        r = self.http.post("/webhook", content=raw, headers={"X-Hub-Signature-256": sign(raw)})
        assert r.status_code == 200, r.text
        answer: dict[str, Any] = r.json()
        return answer

    def said(self, cid: str) -> list[str]:
        return [decode_envelope(p).text or "" for _, p in self.store.inbox(cid)]


@pytest.fixture
def rig(server: RedisServer) -> Iterator[Rig]:
    yield Rig(server)


# --- parsing (pure) -----------------------------------------------------------------------------------------------

def test_a_message_carries_both_ids_and_a_bsuid_only_one_carries_the_bsuid() -> None:
    [both] = parse_webhook(text("wamid.1", "hi", phone=PHONE, user_id=BSUID))
    [only] = parse_webhook(text("wamid.2", "hi", user_id=BSUID))
    assert isinstance(both, InboundMessage) and (both.conversation_id, both.phone, both.user_id) == (PHONE, PHONE, BSUID)
    assert isinstance(only, InboundMessage) and (only.conversation_id, only.phone, only.user_id) == (BSUID, None, BSUID)


def test_system_messages_that_move_an_id_and_the_marketing_preference_are_read() -> None:
    assert parse_webhook(user_id_changed("wamid.s1", BSUID, NEW_BSUID)) == [
        IdentityChange(wamid="wamid.s1", field="user_id", old=BSUID, new=NEW_BSUID, timestamp=NOW)]
    for older in (False, True):
        assert parse_webhook(number_changed("wamid.s2", PHONE, NEW_PHONE, older_shape=older)) == [
            IdentityChange(wamid="wamid.s2", field="phone", old=PHONE, new=NEW_PHONE, timestamp=NOW)]
    [stop] = parse_webhook(preference("stop"))
    assert isinstance(stop, MarketingPreference) and stop.stop and stop.conversation_id == PHONE
    [resume] = parse_webhook(preference("resume", phone=None, user_id=BSUID))
    assert isinstance(resume, MarketingPreference) and not resume.stop and resume.user_id == BSUID


def test_a_status_names_its_recipient_by_both_ids() -> None:
    body = change({"contacts": [{"profile": {"name": "Sheena"}, "wa_id": PHONE, "user_id": BSUID}],
                   "statuses": [{"id": "wamid.out", "status": "delivered", "timestamp": NOW, "recipient_id": PHONE,
                                 "recipient_user_id": BSUID}]})
    [st] = parse_webhook(body)
    assert isinstance(st, StatusUpdate) and (st.conversation_id, st.phone, st.user_id) == (PHONE, PHONE, BSUID)


# --- through the webhook app and Redis ----------------------------------------------------------------------------

def test_a_phone_keyed_player_whose_next_webhook_carries_only_the_bsuid_stays_in_one_conversation(rig: Rig) -> None:
    rig.post(text("wamid.1", "where next?", phone=PHONE))  # a conversation from before BSUIDs: keyed by phone
    rig.post(text("wamid.2", "by the theatre", phone=PHONE, user_id=BSUID))  # 2026: both ids, linked
    rig.post(text("wamid.3", "found it", user_id=BSUID))  # the username rollout: no phone at all
    assert rig.said(PHONE) == ["where next?", "by the theatre", "found it"]
    assert rig.said(BSUID) == []
    assert set(rig.woken) == {PHONE}


def test_a_bsuid_only_player_who_later_shows_the_number_stays_in_the_bsuid_conversation(rig: Rig) -> None:
    rig.post(text("wamid.1", "hello", user_id=BSUID))
    rig.post(text("wamid.2", "again", phone=PHONE, user_id=BSUID))
    rig.post(text("wamid.3", "by phone only", phone=PHONE))
    assert rig.said(BSUID) == ["hello", "again", "by phone only"] and rig.said(PHONE) == []


def test_user_changed_user_id_moves_the_link(rig: Rig) -> None:
    rig.post(text("wamid.1", "hi", phone=PHONE, user_id=BSUID))
    assert rig.post(user_id_changed("wamid.s", BSUID, NEW_BSUID))["ignored"] == 1  # nothing queued for the model
    rig.post(text("wamid.2", "new id, same me", user_id=NEW_BSUID))
    assert rig.said(PHONE) == ["hi", "new id, same me"] and rig.said(NEW_BSUID) == []
    # A reply queued for the player goes to their current ids, phone first.
    assert rig.store.recipient_now(PHONE, PHONE) == PHONE


def test_a_number_change_moves_the_link_and_the_reply_goes_to_the_new_number(rig: Rig) -> None:
    rig.post(text("wamid.1", "hi", phone=PHONE))
    rig.post(number_changed("wamid.s", PHONE, NEW_PHONE))
    rig.post(text("wamid.2", "new phone", phone=NEW_PHONE))
    assert rig.said(PHONE) == ["hi", "new phone"] and rig.said(NEW_PHONE) == []
    assert rig.store.recipient_now(PHONE, PHONE) == NEW_PHONE  # a reply queued before the change follows


def test_two_conversations_of_one_player_are_not_merged_the_older_stays(rig: Rig) -> None:
    before = REGISTRY.get_sample_value("parley_identity_conflicts_total") or 0.0
    rig.post(text("wamid.1", "by phone", phone=PHONE))  # older: a phone conversation predates every link
    rig.post(text("wamid.2", "by bsuid", user_id=BSUID))
    rig.post(text("wamid.3", "both", phone=PHONE, user_id=BSUID))
    rig.post(text("wamid.4", "bsuid again", user_id=BSUID))
    assert rig.said(PHONE) == ["by phone", "both", "bsuid again"]
    assert rig.said(BSUID) == ["by bsuid"]  # kept apart for inspection, not merged
    assert REGISTRY.get_sample_value("parley_identity_conflicts_total") == before + 1


def test_producers_name_the_player_by_either_id(rig: Rig) -> None:
    rig.post(text("wamid.1", "hi", phone=PHONE, user_id=BSUID))
    rig.client.send_event(BSUID, "User has just tagged Harrogate Theatre", message_id="e1")
    assert rig.said(PHONE) == ["hi", "User has just tagged Harrogate Theatre"]
    assert rig.client.resolve(BSUID) == PHONE and rig.client.resolve(PHONE) == PHONE


def test_a_delete_forgets_the_links_but_not_an_opt_out(rig: Rig) -> None:
    rig.post(text("wamid.1", "hi", phone=PHONE, user_id=BSUID))
    rig.client.opt_out(BSUID)
    rig.client.delete(BSUID)  # by either id
    assert rig.client.resolve(BSUID) == BSUID and rig.said(PHONE) == []
    assert rig.store.opted_out(PHONE)


def test_the_marketing_opt_out_webhook_is_recorded_and_resumed(rig: Rig) -> None:
    rig.post(text("wamid.1", "hi", phone=PHONE, user_id=BSUID))
    rig.post(preference("stop", phone=None, user_id=BSUID))
    assert "marketing" in rig.store.opt_outs(PHONE) and not rig.store.templates_allowed(PHONE)
    rig.post(preference("resume"))
    assert rig.store.opt_outs(PHONE) == {} and rig.store.templates_allowed(PHONE)


def test_the_api_summary_says_opted_out_and_takes_either_id(server: RedisServer) -> None:
    client = ConversationClient.from_url(server.url, key_prefix=f"id{uuid.uuid4().hex[:8]}", wake=lambda cid: None)
    http = TestClient(create_app(client, client.store, app_secret=SECRET, verify_token=VERIFY, max_age_seconds=0,
                                 api_tokens="producer-token"))
    raw = meta_bytes(text("wamid.1", "hi", phone=PHONE, user_id=BSUID))
    assert http.post("/webhook", content=raw, headers={"X-Hub-Signature-256": sign(raw)}).status_code == 200
    auth = {"Authorization": "Bearer producer-token"}
    view = http.get(f"/v1/conversations/{BSUID}", headers=auth).json()
    assert (view["conversation_id"], view["opted_out"], view["mailbox_depth"]) == (PHONE, False, 1)
    client.opt_out(PHONE)
    assert http.get(f"/v1/conversations/{BSUID}", headers=auth).json()["opted_out"] is True
    r = http.post(f"/v1/conversations/{BSUID}/events", headers=auth, json={"text": "tagged the theatre"})
    assert r.status_code == 202 and client.store.inbox_depth(PHONE) == 2
