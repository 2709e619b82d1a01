"""The HTTP API's timers: ``at`` on messages, events and resets (RFC 3339 with an offset), and
``DELETE /v1/conversations/{conversation_id}/scheduled/{message_id}`` (a producer's token may cancel its nudges)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.api.test_api import CID, OPERATOR, PRODUCER, Api


def later(seconds: int = 600) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def test_at_holds_each_kind_and_a_producer_cancels_one_once() -> None:
    api = Api()
    for path, body in (("events", {"text": "Still there?", "message_id": "nudge"}),
                       ("messages", {"text": "hi", "message_id": "m"}), ("reset", {"message_id": "r"})):
        r = api.http.post(f"/v1/conversations/{CID}/{path}", headers=PRODUCER, json={**body, "at": later()})
        assert (r.status_code, r.json()) == (202, {"input_id": body["message_id"], "duplicate": False})
    again = api.http.post(f"/v1/conversations/{CID}/events", headers=PRODUCER,
                          json={"text": "Still there?", "message_id": "nudge", "at": later(900)})
    assert again.json() == {"input_id": "nudge", "duplicate": True}
    assert api.inputs() == [] and api.woken == []
    assert [t.message_id for t in api.store.scheduled(CID)] == ["nudge", "m", "r"]
    gone = api.http.delete(f"/v1/conversations/{CID}/scheduled/nudge", headers=PRODUCER)
    assert (gone.status_code, gone.json()) == (200, {"message_id": "nudge", "cancelled": True})
    twice = api.http.delete(f"/v1/conversations/{CID}/scheduled/nudge", headers=OPERATOR)
    assert twice.status_code == 404 and "nudge" in twice.json()["error"]
    assert [t.message_id for t in api.store.scheduled(CID)] == ["m", "r"]


def test_an_at_in_the_past_is_accepted_at_once() -> None:
    api = Api()
    r = api.http.post(f"/v1/conversations/{CID}/events", headers=PRODUCER,
                      json={"text": "tagged", "at": "2000-01-01T00:00:00+01:00"})
    assert r.status_code == 202 and [e["text"] for e in api.inputs()] == ["tagged"] and api.woken == [CID]


def test_an_at_more_than_a_year_ahead_is_a_422_naming_at_and_nothing_is_held() -> None:
    api = Api()
    for path, body in (("events", {"text": "nudge"}), ("messages", {"text": "hi"}), ("reset", {})):
        r = api.http.post(f"/v1/conversations/{CID}/{path}", headers=PRODUCER, json={**body, "at": "2999-01-01T00:00:00Z"})
        assert r.status_code == 422 and r.json()["field"] == "at" and "more than a year" in r.json()["error"], r.json()
    assert api.store.scheduled(CID) == [] and api.inputs() == [] and api.woken == []


def test_cancel_needs_a_token_and_checks_the_conversation_id() -> None:
    api = Api()
    assert api.http.delete(f"/v1/conversations/{CID}/scheduled/x").status_code == 401
    bad = api.http.delete("/v1/conversations/a*b/scheduled/x", headers=PRODUCER)
    assert bad.status_code == 422 and bad.json()["field"] == "conversation_id"
