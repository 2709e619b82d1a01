"""The envelope's limit at the one way in: an input whose encoded envelope is over ``MAX_ENVELOPE_BYTES`` (it could
never be decoded once stored) and a ``system`` prompt over ``MAX_SYSTEM_CHARS`` are refused on every path (the client,
the HTTP API, the stream inlet, a timer held with ``at=``), and nothing is queued or held."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import fakeredis
import pytest
from starlette.testclient import TestClient

from tests.inlet.test_inlet import STREAM, Rig
from tests.support.redis_server import RedisServer, redis_of_its_own
from worker.client import ConversationClient
from worker.envelopes.inputs import MAX_ENVELOPE_BYTES, MAX_SYSTEM_CHARS
from worker.errors import EnvelopeTooLargeError, OversizeInputError
from worker.ingress.app import create_app
from worker.store.redis_store import ConversationStore

CID = "447700900123"
PRODUCER = {"Authorization": "Bearer game-token"}
#: A deployment that lets long texts in: the text limit alone no longer keeps the envelope within its bound.
LONG_TEXTS = 4 * MAX_ENVELOPE_BYTES
#: Within that text limit, yet over the envelope's bytes once encoded (four UTF-8 bytes a character).
HUGE_TEXT = "\U0001f600" * (MAX_ENVELOPE_BYTES // 4 + 1)
server = pytest.fixture(redis_of_its_own)


def _client(max_text_chars: int = LONG_TEXTS) -> ConversationClient:
    store = ConversationStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix="limit")
    return ConversationClient(store, wake=lambda cid: None, max_text_chars=max_text_chars)


def _nothing_queued(client: ConversationClient) -> bool:
    return client.store.inbox(CID) == [] and client.store.scheduled(CID) == []


def _later() -> datetime:
    return datetime.now(UTC) + timedelta(days=300)


@pytest.mark.parametrize("at", [None, "later"])
def test_the_client_refuses_an_envelope_over_its_limit(at: str | None) -> None:
    client = _client()
    when = _later() if at else None
    with pytest.raises(EnvelopeTooLargeError, match=f"at most {MAX_ENVELOPE_BYTES}"):
        client.send_message(CID, HUGE_TEXT, at=when)
    with pytest.raises(EnvelopeTooLargeError):
        client.send_event(CID, HUGE_TEXT, at=when)
    assert _nothing_queued(client)
    fits = "x" * (MAX_ENVELOPE_BYTES // 2)  # long, yet within the envelope: encoded to be sure, and accepted
    assert client.send_event(CID, fits, message_id="e1", at=when).duplicate is False


@pytest.mark.parametrize("at", [None, "later"])
def test_the_client_refuses_a_system_prompt_over_its_bound(at: str | None) -> None:
    client = _client()
    when = _later() if at else None
    with pytest.raises(OversizeInputError) as caught:
        client.send_message(CID, "hi", system="s" * (MAX_SYSTEM_CHARS + 1), at=when)
    assert caught.value.field == "system" and not isinstance(caught.value, EnvelopeTooLargeError)
    assert _nothing_queued(client)
    assert client.send_message(CID, "hi", system="s" * MAX_SYSTEM_CHARS, message_id="m1", at=when).duplicate is False


def test_an_operator_message_over_the_envelope_is_refused() -> None:
    client = _client()
    with pytest.raises(EnvelopeTooLargeError):
        client.send_operator_message(CID, HUGE_TEXT, parts=[{"type": "text", "text": "Try the side door."}])
    assert _nothing_queued(client)
    client.send_operator_message(CID, "Sam here.", parts=[{"type": "text", "text": "Try the side door."}])


@pytest.mark.parametrize("at", [None, "later"])
def test_the_api_answers_413_for_an_envelope_over_its_limit_and_422_for_a_long_system(at: str | None) -> None:
    client = _client()
    http = TestClient(create_app(client, client.store, app_secret="s", verify_token="v", api_tokens="game-token",
                                 max_body_bytes=16 * MAX_ENVELOPE_BYTES))
    extra: dict[str, Any] = {"at": _later().isoformat()} if at else {}
    r = http.post(f"/v1/conversations/{CID}/messages", headers=PRODUCER, json={"text": HUGE_TEXT, **extra})
    assert r.status_code == 413 and str(MAX_ENVELOPE_BYTES) in r.json()["error"], r.text[:300]
    r = http.post(f"/v1/conversations/{CID}/messages", headers=PRODUCER,
                  json={"text": "hi", "system": "s" * (6 << 20), **extra})
    assert (r.status_code, r.json()["field"]) == (422, "system")
    assert _nothing_queued(client)


def test_the_inlet_moves_aside_an_envelope_over_its_limit_and_a_long_system(server: RedisServer) -> None:
    rig = Rig(server)
    rig.client = ConversationClient(rig.store, wake=lambda cid: None, max_text_chars=LONG_TEXTS)
    big = rig.r.xadd(STREAM, {"envelope": json.dumps({"kind": "event", "conversation_id": "c1",
                                                      "text": HUGE_TEXT}, ensure_ascii=False)}).decode()  # type: ignore[union-attr]
    long_system = rig.publish(kind="message", conversation_id="c1", text="hi", system="s" * (MAX_SYSTEM_CHARS + 1))
    rig.publish(kind="event", conversation_id="c1", text="after them")
    rig.inlet("a").step()
    reasons = {d["entry_id"]: d["reason"] for d in rig.dead()}
    assert set(reasons) == {big, long_system}
    assert str(MAX_ENVELOPE_BYTES) in reasons[big] and reasons[long_system].startswith("system")
    assert [text for _, text in rig.inbox("c1")] == ["after them"] and rig.pending() == 0
