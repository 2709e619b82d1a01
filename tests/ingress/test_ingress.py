"""The webhook ingress over HTTP (Starlette TestClient) against real payload shapes and hostile requests.

Real shapes come from ``shared/fixtures/whatsapp`` next to the project (tests.support.whatsapp_fixtures: skipped
when the folder is absent, failed in CI).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

import fakeredis
import pytest
from starlette.testclient import TestClient

from tests.support.whatsapp_fixtures import as_if_sent_now, needs_fixtures
from tests.support.whatsapp_fixtures import fixture_payload as shared_payload
from worker.client import ConversationClient
from worker.envelopes.inputs import decode_envelope
from worker.ingress.app import create_app
from worker.settings import Webhook
from worker.store.redis_store import ConversationStore

SECRET = "app-secret"
VERIFY = "vibecoding"
#: Meta's timestamps are Unix seconds as a string; the ingress refuses one older than PARLEY_WEBHOOK_MAX_AGE_SECONDS.
NOW = str(int(time.time()))
REFUSED = Webhook().refused_reply

def sign(raw: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


def fixture_payload(name: str) -> dict[str, Any]:
    payload: dict[str, Any] = as_if_sent_now(shared_payload(name))
    return payload



def meta_bytes(payload: Any) -> bytes:
    """The body as Meta sends it: compact-ish JSON with non-ASCII escaped as \\uXXXX."""
    return json.dumps(payload).encode()


class Rig:
    """A fresh fakeredis store, a client whose waker records wake-ups, and the app under a TestClient."""

    def __init__(self) -> None:
        self.server = fakeredis.FakeServer()
        self.store = ConversationStore(fakeredis.FakeRedis(server=self.server), prefix="in")
        self.woken: list[str] = []
        self.client = ConversationClient(self.store, wake=lambda cid: self.woken.append(cid))
        self.http = TestClient(create_app(self.client, self.store, app_secret=SECRET, verify_token=VERIFY))

    def post(self, raw: bytes, signature: str | None = "auto") -> Any:  # the TestClient's response type
        headers = {"Content-Type": "application/json"}
        if signature == "auto":
            headers["X-Hub-Signature-256"] = sign(raw)
        elif signature is not None:
            headers["X-Hub-Signature-256"] = signature
        return self.http.post("/webhook", content=raw, headers=headers)

    def inputs(self, cid: str) -> list[tuple[str, str]]:
        return [(mid, decode_envelope(p).text or "") for mid, p in self.store.inbox(cid)]

    def total_depth(self, cids: set[str]) -> int:
        return sum(self.store.inbox_depth(c) for c in cids)


def text_value(wamid: str, sender: str, text: str) -> dict[str, Any]:
    return {"messaging_product": "whatsapp", "metadata": {"phone_number_id": "1"},
            "contacts": [{"wa_id": sender, "profile": {"name": "Sam"}}],
            "messages": [{"from": sender, "id": wamid, "timestamp": NOW, "type": "text", "text": {"body": text}}]}


def text_body(wamid: str = "wamid.A1", sender: str = "447700900123", text: str = "Where next?") -> bytes:
    return meta_bytes({"object": "whatsapp_business_account",
                       "entry": [{"id": "1", "changes": [{"field": "messages",
                                                          "value": text_value(wamid, sender, text)}]}]})


# --- handshake -----------------------------------------------------------------------------------------

def test_handshake_echoes_the_raw_challenge() -> None:
    r = Rig().http.get("/webhook", params={"hub.mode": "subscribe", "hub.verify_token": VERIFY,
                                            "hub.challenge": "1158201444"})
    assert r.status_code == 200
    assert r.text == "1158201444"  # raw, not JSON-encoded
    assert r.headers["content-type"].startswith("text/plain")


@pytest.mark.parametrize("params", [
    {"hub.mode": "subscribe", "hub.verify_token": "wrong", "hub.challenge": "1"},
    {"hub.mode": "unsubscribe", "hub.verify_token": VERIFY, "hub.challenge": "1"},
    {"hub.mode": "subscribe", "hub.challenge": "1"},
    {"hub.mode": "subscribe", "hub.verify_token": VERIFY},
    {},
], ids=["wrong-token", "wrong-mode", "no-token", "no-challenge", "nothing"])
def test_handshake_refused(params: dict[str, str]) -> None:
    assert Rig().http.get("/webhook", params=params).status_code == 403


def test_handshake_refused_when_no_verify_token_is_configured() -> None:
    rig = Rig()
    http = TestClient(create_app(rig.client, rig.store, app_secret=SECRET, verify_token=""))
    r = http.get("/webhook", params={"hub.mode": "subscribe", "hub.verify_token": "", "hub.challenge": "1"})
    assert r.status_code == 403


# --- signature -----------------------------------------------------------------------------------------

def test_signed_text_is_enqueued_once_and_a_retry_is_a_duplicate() -> None:
    rig = Rig()
    raw = text_body()
    r = rig.post(raw)
    assert r.status_code == 200
    assert r.json() == {"accepted": 1, "events": 0, "notices": 0, "duplicates": 0, "statuses": 0, "ignored": 0}
    assert rig.post(raw).json() == {"accepted": 0, "events": 0, "notices": 0, "duplicates": 1, "statuses": 0, "ignored": 0}
    assert rig.inputs("447700900123") == [("wamid.A1", "Where next?")]
    env = decode_envelope(rig.store.inbox("447700900123")[0][1])
    assert env.reply_to == "wamid.A1" and env.recipient == "447700900123" and env.message_id == "wamid.A1"
    assert rig.woken == ["447700900123"]


@pytest.mark.parametrize("signature", [
    None, "", "sha256=", "sha256=" + "0" * 64, "sha1=" + "0" * 40, "garbage", "sha256=not-hex-at-all",
], ids=["missing", "empty", "no-digest", "wrong-digest", "sha1", "garbage", "not-hex"])
def test_missing_or_wrong_signature_is_401_and_enqueues_nothing(signature: str | None) -> None:
    rig = Rig()
    r = rig.post(text_body(), signature)
    assert r.status_code == 401
    assert rig.store.inbox_depth("447700900123") == 0 and rig.woken == []


def test_signature_with_another_secret_is_401() -> None:
    rig = Rig()
    raw = text_body()
    assert rig.post(raw, sign(raw, "another-secret")).status_code == 401
    assert rig.store.inbox_depth("447700900123") == 0


def test_signature_digest_is_case_insensitive() -> None:
    rig = Rig()
    raw = text_body()
    assert rig.post(raw, sign(raw).upper().replace("SHA256=", "sha256=")).status_code == 200


def test_no_app_secret_refuses_every_post() -> None:
    rig = Rig()
    http = TestClient(create_app(rig.client, rig.store, app_secret="", verify_token=VERIFY))
    raw = text_body()
    expected = "sha256=" + hmac.new(b"", raw, hashlib.sha256).hexdigest()
    assert http.post("/webhook", content=raw, headers={"X-Hub-Signature-256": expected}).status_code == 401


def test_signature_over_reserialised_json_fails_raw_bytes_pass() -> None:
    """Meta signs the bytes as sent (emoji escaped as \\ud83d\\udc4d); a signature computed over a
    re-serialisation of the parsed JSON must not be accepted, and the raw-bytes one must."""
    payload = fixture_payload("inbound_reaction.json")
    raw = meta_bytes(payload)
    assert b"\\ud83d\\udc4d" in raw  # the thumbs-up, escaped as Meta sends it
    for reserialised in (json.dumps(json.loads(raw), ensure_ascii=False).encode(),
                         json.dumps(json.loads(raw), separators=(",", ":")).encode(),
                         json.dumps(json.loads(raw), sort_keys=True).encode()):
        assert reserialised != raw
        rig = Rig()
        assert rig.post(raw, sign(reserialised)).status_code == 401
    rig = Rig()
    r = rig.post(raw, sign(raw))
    assert r.status_code == 200 and r.json()["events"] == 1  # a reaction is an event


# --- malformed bodies, outages, health -----------------------------------------------------------------

@pytest.mark.parametrize("raw", [b"{not json", b"", b"\xff\xfe\x00garbage", b"[1, 2]", b'{"no": "entry"}',
                                 b'{"entry": {}}', b'"a string"', b"[" * 100_000 + b"]" * 100_000],
                         ids=["broken", "empty", "binary", "array", "no-entry", "entry-not-list", "string", "deep"])
def test_malformed_body_with_a_valid_signature_is_400(raw: bytes) -> None:
    r = Rig().post(raw)
    assert r.status_code == 400
    assert "malformed webhook body" in r.json()["error"]


def test_odd_shapes_inside_a_webhook_are_ignored_not_errors() -> None:
    body: dict[str, Any] = {"entry": [None, 1, {"changes": "x"}, {"changes": [None, {"value": []}, {"value": {"messages": 5}},
                                                               {"value": {"messages": [1, {"type": "text"}]}}]}]}
    r = Rig().post(meta_bytes(body))
    assert r.status_code == 200
    summary = r.json()
    assert summary["accepted"] == summary["duplicates"] == summary["statuses"] == 0 and summary["ignored"] >= 5


def test_oversized_body_is_413() -> None:
    rig = Rig()
    http = TestClient(create_app(rig.client, rig.store, app_secret=SECRET, verify_token=VERIFY, max_body_bytes=100))
    raw = text_body(text="x" * 200)
    assert http.post("/webhook", content=raw, headers={"X-Hub-Signature-256": sign(raw)}).status_code == 413


def test_oversize_text_is_answered_with_the_short_answer_and_the_rest_of_the_batch_applied() -> None:
    rig = Rig()
    rig.client.max_text_chars = 10
    body = {"entry": [{"changes": [{"field": "messages", "value": text_value("wamid.L", "447700900001", "x" * 50)},
                                   {"field": "messages", "value": text_value("wamid.S", "447700900002", "short")}]}]}
    r = rig.post(meta_bytes(body))
    assert r.status_code == 200 and r.json() == {"accepted": 1, "events": 0, "notices": 1, "duplicates": 0, "statuses": 0, "ignored": 0}
    assert rig.inputs("447700900002") == [("wamid.S", "short")]
    [(mid, payload)] = rig.store.inbox("447700900001")
    notice = decode_envelope(payload)  # never silent: the player hears why, in order with any other reply
    assert (mid, notice.kind, notice.reply_to, notice.recipient) == ("wamid.L", "notice", "wamid.L", "447700900001")
    assert notice.text == REFUSED
    assert rig.woken == ["447700900002", "447700900001"] or sorted(rig.woken) == ["447700900001", "447700900002"]
    # Meta's retry of the same batch: the refused message is a duplicate of its notice, not a second answer.
    again = rig.post(meta_bytes(body)).json()
    assert again["duplicates"] == 2 and again["notices"] == 0
    assert len(rig.store.inbox("447700900001")) == 1


def test_a_lone_surrogate_in_a_text_is_answered_with_the_short_answer_and_the_rest_of_the_batch_applied() -> None:
    rig = Rig()
    # JSON may escape half a surrogate pair ("\\ud83d"): json.loads gives a str that UTF-8 cannot encode.
    body = {"entry": [{"changes": [{"field": "messages", "value": text_value("wamid.U", "447700900001", "hi \ud83d")},
                                   {"field": "messages", "value": text_value("wamid.S", "447700900002", "short")}]}]}
    raw = json.dumps(body).encode()
    assert b"\\ud83d" in raw
    r = rig.post(raw)
    assert r.status_code == 200 and r.json() == {"accepted": 1, "events": 0, "notices": 1, "duplicates": 0, "statuses": 0, "ignored": 0}
    assert rig.inputs("447700900001") == [("wamid.U", REFUSED)]
    assert rig.inputs("447700900002") == [("wamid.S", "short")]


def test_a_refusal_is_dropped_only_when_the_deployment_configured_no_short_answer() -> None:
    rig = Rig()
    rig.client.max_text_chars = 10
    http = TestClient(create_app(rig.client, rig.store, app_secret=SECRET, verify_token=VERIFY, refused_reply=" "))
    raw = text_body(text="x" * 50)
    r = http.post("/webhook", content=raw, headers={"X-Hub-Signature-256": sign(raw)})
    assert r.status_code == 200 and r.json()["ignored"] == 1 and rig.inputs("447700900123") == []


def test_storage_outage_is_503_so_meta_retries() -> None:
    import redis

    from tests.support.redis_server import free_port

    store = ConversationStore(redis.Redis(port=free_port(), socket_connect_timeout=0.2), prefix="x")
    http = TestClient(create_app(ConversationClient(store, lambda c: None), store, app_secret=SECRET,
                                 verify_token=VERIFY))
    raw = text_body()
    r = http.post("/webhook", content=raw, headers={"X-Hub-Signature-256": sign(raw)})
    assert r.status_code == 503
    health = http.get("/healthz")
    assert health.status_code == 503 and health.json()["ok"] is False


def test_status_write_failure_is_503() -> None:
    rig = Rig()
    rig.server.connected = False  # Redis gone
    payload = {"entry": [{"changes": [{"field": "messages", "value": {"statuses": [
        {"id": "wamid.S", "status": "read", "timestamp": NOW, "recipient_id": "447700900123"}]}}]}]}
    assert rig.post(meta_bytes(payload)).status_code == 503
    assert rig.http.get("/healthz").status_code == 503


def test_healthz_ok_when_redis_answers() -> None:
    r = Rig().http.get("/healthz")
    assert r.status_code == 200 and r.json()["ok"] is True
    assert set(r.json()) == {"ok", "webhook_signatures", "last_valid_signature_at", "last_bad_signature_at"}


# --- batching ------------------------------------------------------------------------------------------

def test_a_batch_of_entries_messages_and_statuses_is_walked_in_full() -> None:
    rig = Rig()
    v1 = text_value("wamid.1", "447700900001", "one")
    v1["messages"].append({"from": "447700900002", "id": "wamid.2", "timestamp": NOW, "type": "text",
                           "text": {"body": "two"}})
    v1["statuses"] = [{"id": "wamid.out1", "status": "delivered", "timestamp": NOW, "recipient_id": "447700900001"},
                      {"id": "wamid.out2", "status": "failed", "timestamp": NOW, "recipient_id": "447700900002",
                       "errors": [{"code": 131047, "title": "Re-engagement message",
                                   "error_data": {"details": "More than 24 hours have passed"}}]}]
    v2 = text_value("wamid.3", "447700900001", "three")
    body = {"object": "whatsapp_business_account",
            "entry": [{"id": "a", "changes": [{"field": "messages", "value": v1}]},
                      {"id": "b", "changes": [{"field": "messages", "value": v2}]}]}
    r = rig.post(meta_bytes(body))
    assert r.json() == {"accepted": 3, "events": 0, "notices": 0, "duplicates": 0, "statuses": 2, "ignored": 0}
    assert rig.inputs("447700900001") == [("wamid.1", "one"), ("wamid.3", "three")]
    assert rig.inputs("447700900002") == [("wamid.2", "two")]
    [failed] = rig.store.statuses("447700900002")
    assert (failed.provider_id, failed.status) == ("wamid.out2", "failed")
    assert "131047" in failed.detail and "24 hours" in failed.detail


# --- every real webhook payload ------------------------------------------------------------------------

def _values(payload: dict[str, Any]) -> list[dict[str, Any]]:
    return [ch["value"] for e in payload["entry"] for ch in e.get("changes", [])]


# The outcome of every real payload (each file of the fixtures folder): tests/ingress/test_outcomes.py.


@needs_fixtures
def test_bsuid_only_sender_is_keyed_and_answered_by_the_bsuid() -> None:
    payload = fixture_payload("inbound_text_bsuid_username_no_phone.json")
    msg = _values(payload)[0]["messages"][0]
    assert "from" not in msg
    rig = Rig()
    assert rig.post(meta_bytes(payload)).json()["accepted"] == 1
    bsuid = msg["from_user_id"]
    env = decode_envelope(rig.store.inbox(bsuid)[0][1])
    assert env.conversation_id == bsuid and env.recipient == bsuid and rig.woken == [bsuid]


@needs_fixtures
def test_bsuid_only_status_is_recorded_under_the_bsuid() -> None:
    payload = fixture_payload("status_delivered_bsuid_no_phone.json")
    rig = Rig()
    assert rig.post(meta_bytes(payload)).json()["statuses"] == 1
    assert rig.store.statuses("US.13491208655302741918")[0].status == "delivered"


@needs_fixtures
def test_fixtures_replayed_into_one_store_dedupe_on_shared_sample_wamids() -> None:
    """Meta's samples share wamids; one store sees the later ones as retries (the reason each fixture above
    gets a fresh store)."""
    rig = Rig()
    accepted = duplicates = 0
    for name in ("inbound_text.json", "inbound_text_bsuid_username_no_phone.json"):
        s = rig.post(meta_bytes(fixture_payload(name))).json()
        accepted += s["accepted"]
        duplicates += s["duplicates"]
    # Different conversations (phone vs BSUID): dedupe is per conversation, so both are accepted.
    assert (accepted, duplicates) == (2, 0)


def test_an_overlong_location_is_answered_with_the_short_answer() -> None:
    rig = Rig()
    rig.client.max_text_chars = 200
    value = text_value("wamid.LOC", "447700900001", "unused")
    value["messages"][0] = {"from": "447700900001", "id": "wamid.LOC", "timestamp": NOW, "type": "location",
                            "location": {"latitude": 53.99, "longitude": -1.54, "name": "Harrogate " * 100}}
    r = rig.post(meta_bytes({"entry": [{"changes": [{"field": "messages", "value": value}]}]}))
    assert r.status_code == 200 and r.json()["notices"] == 1 and r.json()["events"] == 0
    [env] = [decode_envelope(p) for _, p in rig.store.inbox("447700900001")]
    assert (env.kind, env.text, env.reply_to, env.recipient) == ("notice", REFUSED, "wamid.LOC", "447700900001")
