"""The handoff operations of the HTTP API (operator scope): pause, resume and a person's messages, what they answer,
and the 422 that names a rich part as not supported yet."""

from __future__ import annotations

import time
from typing import Any

import jsonschema
import pytest

from tests.api.test_api import CID, OPERATOR, PRODUCER, Api
from worker.envelopes.operator_input import MAX_PARTS
from worker.envelopes.producer_bodies import OPERATIONS, OperatorMessageBody
from worker.envelopes.reply_parts import MAX_LIST_ROWS, MAX_SECTIONS
from worker.ingress.openapi import document

BASE = f"/v1/conversations/{CID}"


@pytest.fixture
def api() -> Api:
    return Api()


def test_a_producer_token_cannot_take_a_conversation_over(api: Api) -> None:
    for path, body in (("pause", {}), ("resume", {}), ("operator-messages", {"text": "hi"})):
        assert api.http.post(f"{BASE}/{path}", headers=PRODUCER, json=body).status_code == 403
    assert api.store.paused(CID) is None and api.inputs() == []


def test_pause_resume_and_the_summary_show_the_pause(api: Api) -> None:
    r = api.http.post(f"{BASE}/pause", headers=OPERATOR)  # no body: until resumed
    assert (r.status_code, r.json()) == (200, {"conversation_id": CID, "paused": True, "until": None,
                                               "was_paused": None})
    view = api.http.get(BASE, headers=PRODUCER).json()  # known by its pause alone
    assert (view["paused"], view["paused_until"]) == (True, None)
    timed = api.http.post(f"{BASE}/pause", headers=OPERATOR, json={"seconds": 90}).json()
    assert timed["paused"] and 80 < timed["until"] - time.time() <= 90
    assert api.http.get(BASE, headers=PRODUCER).json()["paused_until"] == pytest.approx(timed["until"], abs=0.01)
    r = api.http.post(f"{BASE}/resume", headers=OPERATOR, json={})
    assert r.json() == {"conversation_id": CID, "paused": False, "until": None, "was_paused": True}
    assert api.http.post(f"{BASE}/resume", headers=OPERATOR).json()["was_paused"] is False
    assert api.store.paused(CID) is None


def test_an_operator_message_is_an_input_accepted_once(api: Api) -> None:
    body = {"text": "Sam here.", "message_id": "op1", "parts": [{"type": "text", "text": "Try the side door."}]}
    r = api.http.post(f"{BASE}/operator-messages", headers=OPERATOR, json=body)
    assert (r.status_code, r.json()) == (202, {"input_id": "op1", "duplicate": False})
    assert api.http.post(f"{BASE}/operator-messages", headers=OPERATOR, json=body).json()["duplicate"] is True
    [env] = api.inputs()
    assert (env["kind"], env["text"], env["parts"]) == ("operator", "Sam here.", ["Try the side door."])


def test_an_operator_message_and_an_answered_event_may_name_their_recipient(api: Api) -> None:
    body = {"text": "Sam here.", "message_id": "op1", "recipient": "447700900999"}
    assert api.http.post(f"{BASE}/operator-messages", headers=OPERATOR, json=body).status_code == 202
    event = {"text": "Round over", "message_id": "e1", "respond": True, "recipient": "447700900999"}
    assert api.http.post(f"{BASE}/events", headers=OPERATOR, json=event).status_code == 202
    assert [env["recipient"] for env in api.inputs()] == ["447700900999", "447700900999"]


@pytest.mark.parametrize("path, body, field", [
    ("operator-messages", {"text": "hi", "parts": [{"type": "video", "link": "https://x/a.mp4"}]}, "parts.0"),
    ("operator-messages", {"text": "hi", "parts": [{"type": "buttons", "text": "Go?", "buttons": [
        {"id": "a", "title": "A title over twenty chars"}]}]}, "parts.0.buttons.0.title"),
    ("operator-messages", {"text": "hi", "parts": [{"type": "location", "latitude": 91, "longitude": 0}]},
     "parts.0.latitude"),
    ("operator-messages", {"text": "hi", "parts": [{"type": "text", "text": " "}]}, "parts.0.text"),
    ("operator-messages", {"text": "hi", "parts": [{"type": "reaction", "emoji": "lol"}]}, "parts.0.emoji"),
    ("operator-messages", {"text": "hi", "parts": [{"type": "buttons", "text": "Go?", "buttons": [
        {"id": " a", "title": "A"}]}]}, "parts.0.buttons.0.id"),
    ("operator-messages", {"text": "hi", "parts": [{"type": "image", "link": "http://x.test/a.png"}]},
     "parts.0.link"),
    ("operator-messages", {"text": " "}, "text"),
    ("operator-messages", {"text": "hi", "pinned": True}, "pinned"),
    ("pause", {"seconds": 0}, "seconds"),
    ("pause", {"seconds": 8 * 86_400}, "seconds"),
    ("pause", {"seconds": "10"}, "seconds"),
    ("resume", {"seconds": 1}, "seconds"),
])
def test_a_wrong_field_is_a_422_naming_it_and_changes_nothing(api: Api, path: str, body: dict[str, Any],
                                                                field: str) -> None:
    r = api.http.post(f"{BASE}/{path}", headers=OPERATOR, json=body)
    assert (r.status_code, r.json()["field"]) == (422, field), r.text
    assert api.inputs() == [] and api.store.paused(CID) is None


def test_the_document_describes_the_handoff_answers() -> None:
    doc = document(OPERATIONS, max_text_chars=100)
    pause = doc["paths"][BASE.replace(CID, "{conversation_id}") + "/pause"]["post"]
    assert pause["requestBody"]["required"] is False and "200" in pause["responses"]
    said = doc["paths"][BASE.replace(CID, "{conversation_id}") + "/operator-messages"]["post"]
    assert said["requestBody"]["required"] is True and "202" in said["responses"]
    state = {**doc["components"]["schemas"]["PauseState"], "components": doc["components"]}
    validator = jsonschema.Draft202012Validator(state)
    assert validator.is_valid({"conversation_id": CID, "paused": True, "until": 1.5, "was_paused": None})


def _largest_list(tag: str) -> dict[str, Any]:
    """A list part holding as many objects as one may: MAX_SECTIONS sections of one row each (MAX_LIST_ROWS in all)."""
    sections = [{"title": f"S{i}", "rows": [{"id": f"{tag}{i}", "title": f"Row {i}"}]} for i in range(MAX_SECTIONS)]
    return {"type": "list", "text": "Pick one", "button": "Choices", "sections": sections}


def test_an_operator_message_with_a_full_list_and_buttons_is_accepted(api: Api) -> None:
    ten_rows = {"type": "list", "text": "Pick one", "button": "Choices",
                "sections": [{"rows": [{"id": f"r{i}", "title": f"Row {i}"} for i in range(MAX_LIST_ROWS)]}]}
    buttons = {"type": "buttons", "text": "Go?", "buttons": [{"id": c, "title": c.upper()} for c in "abc"]}
    body = {"text": "Sam here.", "message_id": "op1", "parts": [ten_rows, buttons]}
    r = api.http.post(f"{BASE}/operator-messages", headers=OPERATOR, json=body)
    assert (r.status_code, r.json()) == (202, {"input_id": "op1", "duplicate": False}), r.text
    [env] = api.inputs()
    assert [p["type"] for p in env["parts"]] == ["list", "buttons"]


def test_the_largest_valid_operator_message_is_accepted(api: Api) -> None:
    parts = [_largest_list(f"p{i}-") for i in range(MAX_PARTS)]
    body = {"text": "Sam here.", "message_id": "op1", "parts": parts}
    assert OperatorMessageBody.max_objects == 1 + sum(1 + len(p["sections"]) * 2 for p in parts)
    r = api.http.post(f"{BASE}/operator-messages", headers=OPERATOR, json=body)
    assert r.status_code == 202, r.text


def test_a_body_past_its_endpoints_objects_is_a_413_naming_the_endpoint(api: Api) -> None:
    r = api.http.post(f"/v1/conversations/{CID}/messages", headers=PRODUCER,
                      json={"text": "hi", "system": {"a": {}}})
    assert r.status_code == 413
    assert "POST /v1/conversations/{conversation_id}/messages" in r.json()["error"]
    assert "webhook" not in r.json()["error"]
    parts = [_largest_list(f"p{i}-") for i in range(MAX_PARTS)]
    parts[0]["sections"][0]["rows"][0]["extra"] = {}
    r = api.http.post(f"{BASE}/operator-messages", headers=OPERATOR, json={"text": "hi", "parts": parts})
    assert r.status_code == 413 and "/operator-messages" in r.json()["error"]
    assert api.inputs() == []
