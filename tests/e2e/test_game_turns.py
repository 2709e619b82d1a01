"""Game-driven turns end to end (a real redis-server, a real Celery worker process, the loopback OpenAI server and
WhatsApp API): an event the model answers, facts that replace, an answered event outside the 24-hour window, and one
that ends a burst's quiet period being waited out."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import Cluster
from tests.support.store_kit import raw
from tests.support.workers import wait_until
from worker.conversation.messages import EVENT_MARK
from worker.conversation.state import decode_state

pytestmark = pytest.mark.e2e

TAGGED = "The player has just tagged Harrogate Theatre"
# A quiet period far longer than any wait of this suite: a reply before it ends was not waited for.
LONG_BURST = {"env": {"PARLEY_BURST_QUIET_SECONDS": "300", "PARLEY_BURST_MAX_WAIT_SECONDS": "600"}}
TEMPLATE = {"env": {"PARLEY_WHATSAPP_TEMPLATE": "game_update", "PARLEY_WHATSAPP_TEMPLATE_LANGUAGE": "en_GB"}}


def _requests_with(cluster: Cluster, needle: str) -> list[dict]:  # type: ignore[type-arg]
    return [r for r in cluster.llm.requests if any(needle in str(m.get("content")) for m in r["messages"])]


@pytest.mark.parametrize("cluster", [TEMPLATE], indirect=True)
def test_an_answered_event_inside_the_window_is_a_reply_and_the_model_saw_an_event(cluster: Cluster) -> None:
    cluster.start_worker("w1")
    client = cluster.client()
    cid = "447700900301"
    client.send_message(cid, "hello", message_id="wamid.e2e-1")  # opens the window
    client.send_event(cid, TAGGED, message_id="evt-1", respond=True)
    assert wait_until(lambda: len(cluster.whatsapp.texts_for(cid)) >= 2, 30), [w.log() for w in cluster.workers]
    assert [s["body"]["type"] for s in cluster.whatsapp.sent] == ["text", "text"]
    [request] = _requests_with(cluster, TAGGED)
    last = request["messages"][-1]
    # The event is the game's (a system-role message with the mark), never a user message of the player's.
    assert last["role"] == "system" and last["content"] == EVENT_MARK + TAGGED
    assert not any(m["role"] == "user" and TAGGED in str(m["content"]) for m in request["messages"])


@pytest.mark.parametrize("cluster", [TEMPLATE], indirect=True)
def test_an_answered_event_outside_the_window_gets_the_template(cluster: Cluster) -> None:
    cluster.start_worker("w1")
    cid = "447700900302"
    cluster.client().send_event(cid, TAGGED, message_id="evt-2", respond=True)  # the player never wrote
    assert wait_until(lambda: len(cluster.whatsapp.sent) >= 1, 30), [w.log() for w in cluster.workers]
    [sent] = cluster.whatsapp.sent
    assert sent["body"]["type"] == "template" and sent["body"]["template"]["name"] == "game_update"
    assert sent["body"]["to"] == cid


def test_three_facts_with_one_key_leave_only_the_last_in_the_prompt(cluster: Cluster) -> None:
    cluster.start_worker("w1")
    client = cluster.client()
    cid = "447700900303"
    for i, place in enumerate(["Bettys", "the Royal Pump Room", "Harrogate Theatre"]):
        client.send_event(cid, f"The player's current target is {place}", message_id=f"target-{i}", key="target")
    client.send_message(cid, "where now?", message_id="wamid.e2e-3")
    assert wait_until(lambda: cluster.whatsapp.texts_for(cid) == ["ack:where now?"], 30), \
        [w.log() for w in cluster.workers]
    [request] = _requests_with(cluster, "current target")
    prompt = " ".join(str(m.get("content")) for m in request["messages"])
    assert "The player's current target is Harrogate Theatre" in prompt
    assert "Bettys" not in prompt and "Pump Room" not in prompt
    assert [(f.key, f.text) for f in decode_state(cluster.store().read_state(cid).blob).facts] == [
        ("target", "The player's current target is Harrogate Theatre")]


@pytest.mark.parametrize("cluster", [LONG_BURST], indirect=True)
def test_an_answered_event_ends_a_running_burst_hold_and_comes_after_the_bursts_reply(cluster: Cluster) -> None:
    cluster.start_worker("w1")
    client = cluster.client()
    cid = "447700900304"
    hold = cluster.store().keys(cid).hold
    r = raw(cluster.store())
    client.send_message(cid, "wait", message_id="wamid.e2e-4")
    # The worker put the turn off for the quiet period: the player may still be typing.
    assert wait_until(lambda: r.exists(hold), 30), [w.log() for w in cluster.workers]
    assert cluster.whatsapp.texts_for(cid) == []
    client.send_event(cid, TAGGED, message_id="evt-4", respond=True)
    assert not r.exists(hold)  # ended by the event's accept, in the same step
    assert wait_until(lambda: len(cluster.whatsapp.texts_for(cid)) >= 2, 30), [w.log() for w in cluster.workers]
    # Two turns, in order: the burst's (its last message the player's) and then the event's (the game's, marked);
    # the loopback model names the last user text, so both replies read "ack:wait".
    with cluster.llm.lock:
        lasts = [(r["messages"][-1]["role"], r["messages"][-1]["content"]) for r in cluster.llm.requests]
    assert lasts == [("user", "wait"), ("system", EVENT_MARK + TAGGED)]
    assert cluster.whatsapp.texts_for(cid) == ["ack:wait", "ack:wait"]
