"""The producers' HTTP API under /v1/ (Starlette TestClient, a fakeredis store): tokens and scopes, the answers a
client in any language acts on, and the Python client's validation applied to HTTP bodies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import fakeredis
import pytest
import redis
from starlette.testclient import TestClient

from worker.client import ConversationClient
from worker.envelopes.inputs import decode_envelope
from worker.errors import ConfigurationError
from worker.ingress.api import parse_tokens
from worker.ingress.app import create_app
from worker.store.limits import StoreLimits
from worker.store.redis_store import ConversationStore


def _in_a_month() -> str:
    """An ``at`` well ahead yet within the year ahead an ``at`` may be."""
    return (datetime.now(UTC) + timedelta(days=30)).isoformat()


PRODUCER = {"Authorization": "Bearer game-token"}
OPERATOR = {"Authorization": "Bearer ops-token"}
CID = "447700900123"


class Api:
    def __init__(self, tokens: str = "game-token,old-game-token,operator:ops-token", max_inbox: int = 1000,
                 body_limit: int | None = None) -> None:
        self.server = fakeredis.FakeServer()
        self.store = ConversationStore(fakeredis.FakeRedis(server=self.server), prefix="api",
                                       limits=StoreLimits(max_inbox=max_inbox))
        self.woken: list[str] = []
        self.client = ConversationClient(self.store, wake=self.woken.append, max_text_chars=100)
        self.http = TestClient(create_app(self.client, self.store, app_secret="s", verify_token="v",
                                          api_tokens=tokens, max_body_bytes=body_limit))

    def inputs(self, cid: str = CID) -> list[dict[str, Any]]:
        return [decode_envelope(p).model_dump(exclude={"accepted_at"}) for _, p in self.store.inbox(cid)]


@pytest.fixture
def api() -> Api:
    return Api()


def test_a_message_is_accepted_once_by_its_message_id(api: Api) -> None:
    r = api.http.post(f"/v1/conversations/{CID}/messages", headers=PRODUCER,
                      json={"text": "Where next?", "message_id": "m1", "reply_to": "wamid.X", "system": "Be brief."})
    assert (r.status_code, r.json()) == (202, {"input_id": "m1", "duplicate": False})
    again = api.http.post(f"/v1/conversations/{CID}/messages", headers=PRODUCER,
                          json={"text": "Where next?", "message_id": "m1"})
    assert (again.status_code, again.json()) == (202, {"input_id": "m1", "duplicate": True})
    [env] = api.inputs()
    assert (env["kind"], env["text"], env["reply_to"], env["system"]) == ("message", "Where next?", "wamid.X",
                                                                          "Be brief.")
    assert api.woken == [CID]


def test_events_and_resets_keep_their_order(api: Api) -> None:
    assert api.http.post(f"/v1/conversations/{CID}/events", headers=PRODUCER,
                         json={"text": "Tagged the theatre", "pinned": True}).status_code == 202
    r = api.http.post(f"/v1/conversations/{CID}/reset", headers=PRODUCER)  # no body at all
    assert r.status_code == 202 and len(r.json()["input_id"]) == 32
    assert [(e["kind"], e["pinned"]) for e in api.inputs()] == [("event", True), ("reset", False)]


def test_a_reset_may_forget_the_archive(api: Api) -> None:
    assert api.http.post(f"/v1/conversations/{CID}/reset", headers=PRODUCER).status_code == 202
    assert api.http.post(f"/v1/conversations/{CID}/reset", headers=PRODUCER, json={"forget": True}).status_code == 202
    assert api.http.post(f"/v1/conversations/{CID}/reset", headers=PRODUCER, json={"forget": "x"}).status_code == 422
    assert [(e["kind"], e["forget"]) for e in api.inputs()] == [("reset", None), ("reset", True)]


def test_an_event_may_set_a_fact_and_ask_for_an_answer(api: Api) -> None:
    body = {"text": "Your target is Harrogate Theatre", "key": "target", "respond": True}
    assert api.http.post(f"/v1/conversations/{CID}/events", headers=PRODUCER, json=body).status_code == 202
    [env] = api.inputs()
    assert (env["kind"], env["key"], env["respond"]) == ("event", "target", True)


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic game-token"},
                                     {"Authorization": "Bearer game-token-and-more"}])
def test_no_or_a_wrong_token_is_401_with_the_scheme(api: Api, headers: dict[str, str]) -> None:
    r = api.http.post(f"/v1/conversations/{CID}/messages", headers=headers, json={"text": "hi"})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert api.inputs() == []


def test_every_configured_token_works_for_rotation(api: Api) -> None:
    r = api.http.post(f"/v1/conversations/{CID}/events", headers={"Authorization": "Bearer old-game-token"},
                      json={"text": "still here"})
    assert r.status_code == 202


def test_a_producer_token_cannot_delete_an_operator_token_can(api: Api) -> None:
    api.http.post(f"/v1/conversations/{CID}/messages", headers=PRODUCER, json={"text": "hi"})
    assert api.http.delete(f"/v1/conversations/{CID}", headers=PRODUCER).status_code == 403
    assert len(api.inputs()) == 1
    assert api.http.delete(f"/v1/conversations/{CID}", headers=OPERATOR).status_code == 204
    assert api.inputs() == []
    # The operator's token does what a producer's does too.
    assert api.http.post(f"/v1/conversations/{CID}/events", headers=OPERATOR, json={"text": "e"}).status_code == 202


def test_the_api_is_off_without_tokens() -> None:
    off = Api(tokens="")
    assert off.http.post(f"/v1/conversations/{CID}/messages", headers=PRODUCER, json={"text": "hi"}).status_code == 404
    assert off.http.get("/v1/openapi.json").status_code == 404


@pytest.mark.parametrize(("body", "field"), [
    ({"text": "hi", "respond": True}, "respond"),        # an event's field, not a message's
    ({"text": "hi", "at": "2030-01-01T00:00:00"}, "at"),    # no offset: ambiguous, refused
    ({"text": "hi", "at": 1893456000}, "at"),
    ({}, "text"),
    ({"text": 5}, "text"),
    ({"text": "   "}, "text"),
    ({"text": "\x1f"}, "text"),                         # blank to str.strip, not to a regex's \\s
    ({"text": "x" * 101}, "text"),                       # the client's PARLEY_MAX_INPUT_CHARS (100 here)
    ({"text": "hi \ud800"}, "text"),                     # a lone surrogate: the client's check
    ({"text": "hi", "message_id": ""}, "message_id"),
    ({"text": "hi", "message_id": "a\nb"}, "message_id"),
])
def test_a_wrong_field_is_a_422_naming_it(api: Api, body: dict[str, Any], field: str | None) -> None:
    import json

    raw = json.dumps(body).encode()  # \ud800 stays escaped, as a client in another language would send it
    r = api.http.post(f"/v1/conversations/{CID}/messages", headers={**PRODUCER, "Content-Type": "application/json"},
                      content=raw)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field and r.json()["error"]
    assert api.inputs() == []


def test_a_bad_conversation_id_is_a_422_naming_it(api: Api) -> None:
    r = api.http.post("/v1/conversations/a:b*c/events", headers=PRODUCER, json={"text": "hi"})
    assert (r.status_code, r.json()["field"]) == (422, "conversation_id")
    assert api.http.get("/v1/conversations/a:b*c", headers=PRODUCER).status_code == 422


def test_not_json_is_400_and_oversize_is_413() -> None:
    api = Api(body_limit=1000)
    r = api.http.post(f"/v1/conversations/{CID}/messages", headers=PRODUCER, content=b"{not json")
    assert r.status_code == 400 and r.json()["error"]
    r = api.http.post(f"/v1/conversations/{CID}/messages", headers=PRODUCER, json={"text": "x" * 2000})
    assert r.status_code == 413
    assert api.inputs() == []


def test_a_full_mailbox_is_429_with_retry_after_and_the_retry_is_safe() -> None:
    api = Api(max_inbox=1)
    assert api.http.post(f"/v1/conversations/{CID}/events", headers=PRODUCER,
                         json={"text": "one", "message_id": "e1"}).status_code == 202
    r = api.http.post(f"/v1/conversations/{CID}/events", headers=PRODUCER, json={"text": "two", "message_id": "e2"})
    assert r.status_code == 429 and int(r.headers["retry-after"]) > 0
    fakeredis.FakeRedis(server=api.server).delete(api.store.keys(CID).inbox)  # a worker drained the mailbox
    r = api.http.post(f"/v1/conversations/{CID}/events", headers=PRODUCER, json={"text": "two", "message_id": "e2"})
    assert (r.status_code, r.json()["duplicate"]) == (202, False)


def test_redis_down_is_503_with_retry_after() -> None:
    store = ConversationStore(redis.Redis(port=1, socket_connect_timeout=0.2), prefix="api")
    client = ConversationClient(store, wake=lambda cid: None)
    http = TestClient(create_app(client, store, app_secret="s", verify_token="v", api_tokens="game-token"))
    r = http.post(f"/v1/conversations/{CID}/messages", headers=PRODUCER, json={"text": "hi", "message_id": "m"})
    assert r.status_code == 503 and int(r.headers["retry-after"]) > 0
    assert http.get(f"/v1/conversations/{CID}", headers=PRODUCER).status_code == 503


def test_the_summary_is_what_parley_show_prints_and_404_when_unknown(api: Api) -> None:
    from worker.client.summary import summary

    assert api.http.get(f"/v1/conversations/{CID}", headers=PRODUCER).status_code == 404
    api.http.post(f"/v1/conversations/{CID}/messages", headers=PRODUCER, json={"text": "hi"})
    r = api.http.get(f"/v1/conversations/{CID}", headers=PRODUCER)
    assert r.status_code == 200
    assert r.json() == summary(api.store, CID) and r.json()["mailbox_depth"] == 1


def test_a_conversation_holding_only_a_timer_is_known_and_its_summary_counts_it(api: Api) -> None:
    """A game that scheduled the first nudge of a new player can see it is held (over HTTP there is no other way)."""
    body = {"text": "Still there?", "message_id": "nudge", "at": _in_a_month()}
    assert api.http.post(f"/v1/conversations/{CID}/events", headers=PRODUCER, json=body).status_code == 202
    r = api.http.get(f"/v1/conversations/{CID}", headers=PRODUCER)
    assert r.status_code == 200 and r.json()["scheduled"] == 1 and r.json()["mailbox_depth"] == 0
    api.http.delete(f"/v1/conversations/{CID}/scheduled/nudge", headers=PRODUCER)
    assert api.http.get(f"/v1/conversations/{CID}", headers=PRODUCER).status_code == 404


def test_token_syntax() -> None:
    assert parse_tokens(" a , operator:b,producer:c,,X1:y:z") == [
        (b"a", "producer"), (b"b", "operator"), (b"c", "producer"), (b"X1:y:z", "producer")]
    with pytest.raises(ConfigurationError, match="unknown scope 'operater'"):
        parse_tokens("operater:b")
    with pytest.raises(ConfigurationError, match="empty token"):
        parse_tokens("operator:")
