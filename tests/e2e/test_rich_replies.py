"""End to end, rich replies: real Celery workers, the loopback model calling the reply tools and the loopback
WhatsApp. The parts go out as their Cloud API messages in the order the model produced them, each once, also when
the worker is SIGKILLed after the tools ran (the retried turn replays the recorded parts from its journal)."""

from __future__ import annotations

import signal
import threading
from typing import Any

import pytest

from tests.e2e.conftest import Cluster
from tests.support.workers import wait_until

pytestmark = pytest.mark.e2e

PIN = {"latitude": 53.9921, "longitude": -1.5418, "name": "Harrogate Theatre"}
BUTTONS = {"text": "Found it?", "buttons": [{"id": "yes", "title": "Yes"}, {"id": "hint", "title": "Hint please"}]}


def _plan(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [("send_location", PIN), ("send_buttons", BUTTONS)]


def _sent_to(cluster: Cluster, cid: str) -> list[dict[str, Any]]:
    with cluster.whatsapp.lock:
        return [s["body"] for s in cluster.whatsapp.sent if s["body"].get("to") == cid]


def _assert_rich_reply(bodies: list[dict[str, Any]], cid: str) -> None:
    assert [b["type"] for b in bodies] == ["location", "interactive", "text"], bodies
    assert bodies[0]["location"] == PIN
    assert bodies[1]["interactive"]["type"] == "button"
    assert [b["reply"]["id"] for b in bodies[1]["interactive"]["action"]["buttons"]] == ["yes", "hint"]
    assert bodies[2]["text"]["body"].startswith(f"ack:{cid} where next?")
    tags = [b["biz_opaque_callback_data"] for b in bodies]
    assert len(set(tags)) == 3  # each part once


def test_a_turn_with_reply_tools_sends_its_parts_in_order_once(cluster: Cluster) -> None:
    cluster.llm.plan_tools = _plan
    cluster.start_worker("w1")
    client = cluster.client()
    cids = [f"4477002{i:05d}" for i in range(2)]
    for cid in cids:
        client.send_message(cid, f"{cid} where next?", message_id=f"{cid}-m1")
    assert wait_until(lambda: all(len(_sent_to(cluster, c)) >= 3 for c in cids), 60), \
        [w.log() for w in cluster.workers]
    for cid in cids:
        _assert_rich_reply(_sent_to(cluster, cid), cid)


def test_the_parts_survive_a_sigkill_after_the_tools_ran_and_go_once(cluster: Cluster) -> None:
    cluster.llm.plan_tools = _plan
    killed = threading.Event()
    cid = "447700300001"

    def kill_at_the_final_answer(body: dict[str, Any]) -> None:
        # The request holding the tools' results: they ran and are journalled; the reply is not committed yet.
        if not killed.is_set() and any(m.get("role") == "tool" for m in body.get("messages", [])):
            killed.set()
            w = cluster.workers[0]
            w.kill(signal.SIGKILL)

    cluster.llm.on_request = kill_at_the_final_answer
    for server in (cluster.whatsapp.http.server, cluster.llm.http.server):  # a killed client resets its connections
        server.handle_error = lambda *a: None  # type: ignore[method-assign]
    cluster.start_worker("w1")
    cluster.client().send_message(cid, f"{cid} where next?", message_id=f"{cid}-m1")
    assert wait_until(killed.is_set, 60), [w.log() for w in cluster.workers]
    cluster.start_worker("w2")
    assert wait_until(lambda: len(_sent_to(cluster, cid)) >= 3, 120), [w.log() for w in cluster.workers]
    wait_until(lambda: False, 3)  # a moment for any duplicate to show
    _assert_rich_reply(_sent_to(cluster, cid), cid)
