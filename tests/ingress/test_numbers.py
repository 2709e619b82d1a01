"""Several business numbers at the webhook ingress: real payloads (the shared fixtures, one copy per number) route
each change to the conversations of the number it names; the same player on two numbers has two conversations;
a webhook for a number that is not configured is refused, counted and answered 200, never queued."""

from __future__ import annotations

import copy
import logging
from typing import Any

import fakeredis
import pytest
from prometheus_client import REGISTRY
from starlette.testclient import TestClient

from tests.ingress.test_ingress import SECRET, VERIFY, fixture_payload, meta_bytes, sign
from tests.support.whatsapp_fixtures import needs_fixtures
from worker.client import ConversationClient
from worker.envelopes.inputs import decode_envelope
from worker.ingress.app import create_app
from worker.runtime.numbers_file import served_numbers
from worker.settings.business_numbers import Number, Numbers
from worker.settings.delivery import WhatsApp
from worker.store.redis_store import ConversationStore

MAIN, QUIZ, STRANGER = "106540352242922", "106540352242923", "999000111222333"
PLAYER = "16505551234"  # the fixture's sender
NUMBERS = Numbers(Number(MAIN, "token-main"), (Number(QUIZ, "token-quiz", system_prompt="You are the quiz master."),))

pytestmark = needs_fixtures


def on_number(payload: dict[str, Any], pnid: str, wamid: str | None = None) -> dict[str, Any]:
    """A fixture as Meta sends it for another business number of the account (and another message id)."""
    payload = copy.deepcopy(payload)
    for entry in payload["entry"]:
        for change in entry["changes"]:
            change["value"]["metadata"]["phone_number_id"] = pnid
            for item in change["value"].get("messages", []) + change["value"].get("statuses", []):
                item["id"] = wamid or f"{item['id']}.{pnid}"
    return payload


def batch(*payloads: dict[str, Any]) -> bytes:
    """One POST carrying the entries of several payloads, in order (Meta batches per account)."""
    return meta_bytes({"object": "whatsapp_business_account", "entry": [e for p in payloads for e in p["entry"]]})


class NumbersRig:
    def __init__(self, numbers: Numbers | None = NUMBERS) -> None:
        self.store = ConversationStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix="nb")
        self.client = ConversationClient(self.store, wake=lambda cid: None)
        self.http = TestClient(create_app(self.client, self.store, app_secret=SECRET, verify_token=VERIFY,
                                          numbers=numbers))

    def post(self, raw: bytes) -> Any:
        return self.http.post("/webhook", content=raw, headers={"X-Hub-Signature-256": sign(raw),
                                                                "Content-Type": "application/json"})

    def envelopes(self, cid: str) -> list[Any]:
        return [decode_envelope(p) for _, p in self.store.inbox(cid)]


def unknown_number_count() -> float:
    return REGISTRY.get_sample_value("parley_webhook_records_total", {"outcome": "unknown_number"}) or 0.0


def test_the_same_player_on_two_numbers_has_two_conversations_each_answered_from_its_number() -> None:
    rig = NumbersRig()
    text = fixture_payload("inbound_text.json")
    r = rig.post(batch(text, on_number(text, QUIZ)))
    assert r.status_code == 200 and r.json()["accepted"] == 2
    [main] = rig.envelopes(PLAYER)  # the default number: today's id
    [quiz] = rig.envelopes(f"{QUIZ}.{PLAYER}")
    assert main.recipient in (None, PLAYER) and quiz.recipient == f"{QUIZ}.{PLAYER}"
    assert main.text == quiz.text == "Does it come in another color?"
    # Queued as the player wrote it: the number's own prompt is decided in the turn, from the worker's numbers file
    # (tests/worker/test_number_prompt.py), for messages, answered events and timers alike.
    assert main.system is None and quiz.system is None


def test_every_kind_of_record_moves_to_the_number_it_was_sent_to() -> None:
    rig = NumbersRig()
    names = ("inbound_location.json", "inbound_unsupported.json", "inbound_image.json", "inbound_reaction.json")
    for name in names:
        assert rig.post(batch(on_number(fixture_payload(name), QUIZ, wamid=f"wamid.{name}"))).status_code == 200
    players = {p["entry"][0]["changes"][0]["value"]["messages"][0]["from"]
               for p in map(fixture_payload, names)}
    for player in players:
        assert rig.store.inbox(player) == []  # nothing on the default number's conversations
        for env in rig.envelopes(f"{QUIZ}.{player}"):
            assert env.recipient in (None, f"{QUIZ}.{player}"), env
    assert sum(len(rig.envelopes(f"{QUIZ}.{p}")) for p in players) == len(names)
    status = fixture_payload("status_delivered.json")
    assert rig.post(batch(on_number(status, QUIZ, wamid="wamid.quiz-out"))).json()["statuses"] == 1
    assert [s.provider_id for s in rig.store.statuses(f"{QUIZ}.{PLAYER}")] == ["wamid.quiz-out"]
    assert rig.store.statuses(PLAYER) == []


def test_a_webhook_for_a_number_not_configured_is_refused_and_counted_never_queued() -> None:
    rig = NumbersRig()
    text = fixture_payload("inbound_text.json")
    before = unknown_number_count()
    r = rig.post(batch(on_number(text, STRANGER), on_number(text, QUIZ)))
    assert r.status_code == 200  # Meta's retries would not make the number known
    assert r.json()["accepted"] == 1 and r.json()["ignored"] == 1
    assert unknown_number_count() == before + 1
    assert rig.store.inbox(PLAYER) == [] and rig.store.inbox(f"{STRANGER}.{PLAYER}") == []
    assert len(rig.envelopes(f"{QUIZ}.{PLAYER}")) == 1  # the rest of the batch is applied


def test_one_number_without_a_file_keeps_todays_ids_whatever_number_the_webhook_names() -> None:
    rig = NumbersRig(numbers=None)
    text = fixture_payload("inbound_text.json")
    assert rig.post(batch(on_number(text, QUIZ))).json()["accepted"] == 1
    [env] = rig.envelopes(PLAYER)
    assert env.system is None


def skipped_count(reason: str = "unknown_number") -> float:
    return REGISTRY.get_sample_value("parley_webhook_changes_skipped_total", {"reason": reason}) or 0.0


def test_the_ingress_serves_the_one_configured_number_the_file_or_every_number_when_none_is_set() -> None:
    one = served_numbers(WhatsApp(phone_number_id=MAIN))
    assert one is not None and [n.phone_number_id for n in one.all] == [MAIN]
    assert served_numbers(WhatsApp()) is None  # the demo: no number configured


def test_one_configured_number_skips_the_changes_for_another_number_of_the_account(
        caplog: pytest.LogCaptureFixture) -> None:
    rig = NumbersRig(numbers=served_numbers(WhatsApp(phone_number_id=MAIN)))
    text = fixture_payload("inbound_text.json")
    before = skipped_count()
    with caplog.at_level(logging.WARNING, logger="parley.ingress"):
        r = rig.post(batch(on_number(text, STRANGER), on_number(text, MAIN, wamid="wamid.main")))
        again = rig.post(batch(on_number(text, STRANGER, wamid="wamid.stranger-2")))
    assert r.status_code == again.status_code == 200  # Meta's retries would not make the number served
    assert (r.json()["accepted"], r.json()["ignored"]) == (1, 1)
    assert skipped_count() == before + 2
    [env] = rig.envelopes(PLAYER)  # only the served number's message, answered from it
    assert env.message_id == "wamid.main"
    assert rig.store.inbox(f"{STRANGER}.{PLAYER}") == []
    lines = [rec for rec in caplog.records if STRANGER in rec.getMessage()]
    assert len(lines) == 1 and "skipped" in lines[0].getMessage()  # once per number


def test_with_no_number_configured_every_number_is_accepted_and_that_is_said_once_at_start(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="parley.ingress"):
        rig = NumbersRig(numbers=None)
    assert [r.getMessage() for r in caplog.records if "no WhatsApp business number" in r.getMessage()] != []
    caplog.clear()
    before = skipped_count()
    text = fixture_payload("inbound_text.json")
    assert rig.post(batch(on_number(text, STRANGER))).json()["accepted"] == 1
    assert skipped_count() == before and len(rig.envelopes(PLAYER)) == 1
    assert [r for r in caplog.records if "no WhatsApp business number" in r.getMessage()] == []
