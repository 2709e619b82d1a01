"""End to end: signed webhooks into the real ingress app, a real Celery worker process, the loopback OpenAI server
and the loopback WhatsApp API. A player keyed by phone whose next webhook carries only their business-scoped user id
is answered in the same conversation (the model sees both messages), at their phone number; STOP gets one
confirmation, after which a game event the model would answer sends nothing while the player's own message is
answered."""

from __future__ import annotations

import time
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.e2e.conftest import Cluster
from tests.ingress.test_identity_webhooks import BSUID, PHONE, text
from tests.ingress.test_ingress import SECRET, VERIFY, meta_bytes, sign
from tests.support.workers import wait_until
from worker.ingress.app import create_app
from worker.settings import OptOut

pytestmark = pytest.mark.e2e


def test_one_player_whatever_id_and_stop_end_to_end(cluster: Cluster) -> None:
    cluster.start_worker("w1")
    client = cluster.client()
    http = TestClient(create_app(client, client.store, app_secret=SECRET, verify_token=VERIFY))

    def post(payload: dict[str, Any]) -> None:
        raw = meta_bytes(payload)
        assert http.post("/webhook", content=raw, headers={"X-Hub-Signature-256": sign(raw)}).status_code == 200

    def bodies() -> list[str]:
        return [s["body"].get("text", {}).get("body", "") for s in cluster.whatsapp.sent]

    def wait_for(n: int) -> None:
        assert wait_until(lambda: len(cluster.whatsapp.sent) >= n, 60), [w.log() for w in cluster.workers]

    post(text("wamid.e1", "where next?", phone=PHONE, user_id=BSUID))
    wait_for(1)
    post(text("wamid.e2", "found the theatre", user_id=BSUID))  # no phone number in this one
    wait_for(2)
    assert [s["body"]["to"] for s in cluster.whatsapp.sent] == [PHONE, PHONE]
    last = cluster.llm.requests[-1]["messages"]
    assert [m["content"] for m in last if m["role"] == "user"][-2:] == ["where next?", "found the theatre"]

    post(text("wamid.e3", "STOP", user_id=BSUID))
    wait_for(3)
    assert bodies()[-1] == OptOut().reply
    calls = len(cluster.llm.requests)
    client.send_event(BSUID, "A new clue is out", message_id="ev1", respond=True)  # the game names them by BSUID
    assert wait_until(lambda: client.store.inbox_depth(PHONE) == 0, 30)
    time.sleep(0.5)
    assert len(cluster.whatsapp.sent) == 3 and len(cluster.llm.requests) == calls  # applied, nothing sent
    post(text("wamid.e4", "ok one more", phone=PHONE))  # their own message: answered (and opts them in)
    wait_for(4)
    assert bodies()[-1] == "ack:ok one more" and not client.store.opted_out(PHONE)

