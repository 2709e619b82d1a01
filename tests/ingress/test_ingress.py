"""The webhook ingress against real payload shapes (shared/fixtures/whatsapp) and hostile requests."""

from __future__ import annotations

import hashlib
import hmac
import json
import pathlib

import fakeredis
import pytest
from starlette.testclient import TestClient

from worker.client import ConversationClient
from worker.envelopes import decode_envelope
from worker.ingress.app import create_app
from worker.ingress.parse import parse_webhook
from worker.store.redis_store import ConversationStore

SECRET = "app-secret"
FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "whatsapp"
WEBHOOKS = sorted(p for p in FIXTURES.glob("*.json") if p.name.startswith(("inbound_", "status_", "webhook_"))) \
    if FIXTURES.is_dir() else []


def sign(raw: bytes) -> str:
    return "sha256=" + hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()


class Rig:
    def __init__(self) -> None:
        self.store = ConversationStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix="in")
        self.woken: list[str] = []
        self.client = ConversationClient(self.store, self.woken.append)
        self.http = TestClient(create_app(self.client, self.store, app_secret=SECRET, verify_token="vt"))

    def post(self, raw: bytes, signature: str | None = "auto"):  # type: ignore[no-untyped-def]
        headers = {"Content-Type": "application/json"}
        if signature == "auto":
            headers["X-Hub-Signature-256"] = sign(raw)
        elif signature is not None:
            headers["X-Hub-Signature-256"] = signature
        return self.http.post("/webhook", content=raw, headers=headers)

    def inputs(self, cid: str) -> list[tuple[str, str]]:
        return [(mid, decode_envelope(p).text or "") for mid, p in self.store.inbox(cid)]


def text_body(wamid: str = "wamid.A1", sender: str = "447700900123", text: str = "Where next?") -> bytes:
    return json.dumps({"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [{"field": "messages",
        "value": {"messaging_product": "whatsapp", "metadata": {"phone_number_id": "1"},
                  "contacts": [{"wa_id": sender, "profile": {"name": "Sam"}}],
                  "messages": [{"from": sender, "id": wamid, "timestamp": "1", "type": "text",
                                "text": {"body": text}}]}}]}]}).encode()


def test_handshake() -> None:
    rig = Rig()
    ok = rig.http.get("/webhook", params={"hub.mode": "subscribe", "hub.verify_token": "vt", "hub.challenge": "1158201444"})
    assert ok.status_code == 200 and ok.text == "1158201444"
    bad = rig.http.get("/webhook", params={"hub.mode": "subscribe", "hub.verify_token": "nope", "hub.challenge": "x"})
    assert bad.status_code == 403


def test_signed_text_is_enqueued_once_and_retries_are_ignored() -> None:
    rig = Rig()
    raw = text_body()
    r = rig.post(raw)
    assert r.status_code == 200 and r.json()["accepted"] == 1
    assert rig.post(raw).json() == {"accepted": 0, "duplicates": 1, "statuses": 0, "ignored": 0}
    assert rig.inputs("447700900123") == [("wamid.A1", "Where next?")]
    env = decode_envelope(rig.store.inbox("447700900123")[0][1])
    assert env.reply_to == "wamid.A1" and env.recipient == "447700900123"
    assert rig.woken == ["447700900123"]


@pytest.mark.parametrize("signature", [None, "sha256=" + "0" * 64, "sha1=abc", "garbage", ""])
def test_missing_or_wrong_signature_is_401_and_enqueues_nothing(signature: str | None) -> None:
    rig = Rig()
    assert rig.post(text_body(), signature).status_code == 401
    assert rig.store.inbox_depth("447700900123") == 0


def test_signature_is_over_the_raw_bytes_not_reserialised_json() -> None:
    rig = Rig()
    raw = json.dumps({"entry": [], "note": "äöå"}).encode()  # sent with \\u escapes, as Meta does
    reserialised = json.dumps(json.loads(raw), ensure_ascii=False).encode()
    assert raw != reserialised
    assert rig.post(raw, sign(reserialised)).status_code == 401
    assert rig.post(raw, sign(raw)).status_code == 200


def test_malformed_body_with_a_valid_signature_is_400() -> None:
    rig = Rig()
    assert rig.post(b"{not json").status_code == 400
    assert rig.post(b'{"no": "entry"}').status_code == 400


def test_storage_outage_is_503_so_meta_retries() -> None:
    import redis

    from tests.support.redis_server import free_port

    store = ConversationStore(redis.Redis(port=free_port(), socket_connect_timeout=0.2), prefix="x")
    http = TestClient(create_app(ConversationClient(store, lambda c: None), store, app_secret=SECRET, verify_token="v"))
    raw = text_body()
    r = http.post("/webhook", content=raw, headers={"X-Hub-Signature-256": sign(raw)})
    assert r.status_code == 503
    assert http.get("/healthz").status_code == 503


@pytest.mark.skipif(not WEBHOOKS, reason="shared WhatsApp fixtures not present")
@pytest.mark.parametrize("path", WEBHOOKS, ids=lambda p: p.name)
def test_every_real_webhook_payload(path: pathlib.Path) -> None:
    rig = Rig()  # fresh per fixture: Meta reuses sample wamids across unrelated samples
    payload = json.loads(path.read_text())["payload"]
    raw = json.dumps(payload).encode()
    r = rig.post(raw)
    assert r.status_code == 200, r.text
    summary = r.json()
    records = parse_webhook(payload)
    name = path.name
    if name.startswith("status_"):
        assert summary["statuses"] == 1
        st = records[0]
        cid = st.conversation_id  # type: ignore[union-attr]
        assert rig.store.statuses(cid)[0].split("\t")[1] == payload["entry"][0]["changes"][0]["value"]["statuses"][0]["status"]
        if "failed" in name:
            assert rig.store.statuses(cid)[0].split("\t")[3]  # the error code and text are kept
    elif name.startswith("inbound_text") or name in ("inbound_button_quick_reply.json",
                                                     "inbound_interactive_button_reply.json",
                                                     "inbound_interactive_list_reply.json"):
        assert summary["accepted"] == 1, summary
        msg = payload["entry"][0]["changes"][0]["value"]["messages"][0]
        expected_cid = msg.get("from") or msg.get("from_user_id")
        assert rig.store.inbox_depth(expected_cid.lstrip("+")) == 1
    elif name == "inbound_multiple_changes_one_entry_netflie.json":
        assert summary["accepted"] + summary["duplicates"] == 2  # both changes walked (same placeholder id)
    else:
        assert summary["accepted"] == 0 and summary["ignored"] >= 1, summary


def test_bsuid_only_sender_uses_the_business_scoped_id() -> None:
    path = FIXTURES / "inbound_text_bsuid_username_no_phone.json"
    if not path.exists():
        pytest.skip("fixture not present")
    payload = json.loads(path.read_text())["payload"]
    rec = parse_webhook(payload)[0]
    msg = payload["entry"][0]["changes"][0]["value"]["messages"][0]
    assert "from" not in msg and rec.conversation_id == msg["from_user_id"]  # type: ignore[union-attr]
