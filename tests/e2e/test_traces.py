"""End to end, traces (issue 32): real Celery worker processes and the real webhook ingress export their spans over
OTLP/HTTP to a loopback receiver that decodes them with opentelemetry-proto. A player's message is one connected
trace, from the webhook's POST through the accept, the queue, the drain, the turn, the model and tool calls, the
commit and the send, to the status webhooks; a worker SIGKILLed mid-turn leaves the retry in the same trace; a
burst's turn links the traces of both messages; the player's words are on no span by default."""

from __future__ import annotations

import hashlib
import hmac
import json
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Cluster
from tests.support.fake_openai import hold_first_request
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan, otel_env
from tests.support.status_webhooks import IngressServer, StatusPoster
from tests.support.workers import wait_until
from worker.observability import tracing
from worker.observability.tracing.pseudonyms import pseudonym
from worker.store.trace_ids import fleet_trace_key
from worker.testing import reset_tracing

pytestmark = pytest.mark.e2e

SECRET = "app-secret"
PLAYER = "447700900742"
WORDS = "meet me at 12 Secret Lane"


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    """The receiver, and tracing on in this process too (the ingress under test runs here)."""
    r = OtlpReceiver().start()
    for key, value in otel_env(r, "parley-webhook").items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    reset_tracing()
    yield r
    reset_tracing()
    monkeypatch.undo()
    reset_tracing()
    r.stop()


def traced_worker(cluster: Cluster, receiver: OtlpReceiver, name: str, **kw: Any) -> None:
    env = {**otel_env(receiver, "parley-worker"), "OTEL_RESOURCE_ATTRIBUTES": f"service.instance.id={name}"}
    cluster.start_worker(name, env=env, **kw)


def webhook(wamid: str, text: str) -> bytes:
    value = {"messaging_product": "whatsapp",
             "metadata": {"display_phone_number": "15550783881", "phone_number_id": "106540352242922"},
             "contacts": [{"wa_id": PLAYER, "profile": {"name": "Sam"}}],
             "messages": [{"from": PLAYER, "id": wamid, "timestamp": str(int(time.time())), "type": "text",
                           "text": {"body": text}}]}
    return json.dumps({"object": "whatsapp_business_account",
                       "entry": [{"id": "102290129340398", "changes": [{"field": "messages", "value": value}]}]}
                      ).encode()


def post(ingress: IngressServer, wamid: str, text: str) -> None:
    raw = webhook(wamid, text)
    sig = "sha256=" + hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()
    r = httpx.post(f"{ingress.url}/webhook", content=raw, headers={"X-Hub-Signature-256": sig}, timeout=10)
    assert r.status_code == 200 and r.json()["accepted"] == 1, r.text


def accept_of(receiver: OtlpReceiver, wamid: str) -> ReceivedSpan:
    assert receiver.wait_for(lambda: any(s.attributes.get("parley.input.id") == wamid
                                         for s in receiver.named("accept")), 10)
    return next(s for s in receiver.named("accept") if s.attributes.get("parley.input.id") == wamid)


def names_in(receiver: OtlpReceiver, trace_id: str) -> list[str]:
    return [s.name for s in receiver.trace(trace_id)]


def test_a_players_message_is_one_connected_trace_from_the_webhook_to_the_status(
        cluster: Cluster, receiver: OtlpReceiver) -> None:
    cluster.env["PARLEY_TOOLS"] = "tests.support.game_tools:TOOLS"
    cluster.llm.plan_tools = lambda body: [("look", {})]
    traced_worker(cluster, receiver, "w1")
    ingress = IngressServer(cluster.client(), app_secret=SECRET).start()
    poster = StatusPoster(ingress.url, app_secret=SECRET).start()
    cluster.whatsapp.on_sent = poster.sent
    try:
        post(ingress, "wamid.T1", WORDS)
        assert wait_until(lambda: len(cluster.whatsapp.texts_for(PLAYER)) == 1, 60), cluster.workers[0].log()
        assert poster.drain()
        tracing.flush()
        tid = accept_of(receiver, "wamid.T1").trace_id
        wanted = {"POST /webhook", "accept", "queue", "drain", "turn", "chat gpt-4o-mini", "execute_tool look",
                  "commit", "send", "status sent", "status delivered"}
        assert receiver.wait_for(lambda: wanted <= set(names_in(receiver, tid)), 20), names_in(receiver, tid)
    finally:
        poster.stop()
        ingress.stop()
    spans = receiver.trace(tid)
    by_id = {s.span_id: s for s in spans}
    [root] = [s for s in spans if not s.parent]
    assert root.name == "POST /webhook" and root.service == "parley-webhook"
    assert all(not s.parent or s.parent in by_id for s in spans), "a span's parent is missing: not one trace"
    assert {s.service for s in spans if s.name in ("drain", "turn", "commit", "send")} == {"parley-worker"}

    def parent(name: str) -> str:
        return by_id[next(s for s in spans if s.name == name).parent].name

    assert (parent("accept"), parent("queue"), parent("drain"), parent("turn")) == (
        "POST /webhook", "accept", "accept", "drain")
    assert (parent("chat gpt-4o-mini"), parent("execute_tool look"), parent("commit"), parent("send")) == (
        "turn", "turn", "drain", "drain")
    assert parent("status sent") == parent("status delivered") == "send"
    chat = next(s for s in spans if s.name == "chat gpt-4o-mini").attributes
    # The player's number is the fleet's one pseudonym, in the webhook's process and the worker's alike.
    shown = pseudonym(PLAYER, fleet_trace_key(cluster.redis.client(), cluster.env["PARLEY_KEY_PREFIX"]))
    assert (chat["gen_ai.operation.name"], chat["gen_ai.provider.name"], chat["gen_ai.request.model"],
            chat["gen_ai.conversation.id"]) == ("chat", "openai", "gpt-4o-mini", shown)
    assert {(s.service, s.attributes["gen_ai.conversation.id"]) for s in spans
            if s.name in ("accept", "turn", "send", "status sent")} == {("parley-webhook", shown),
                                                                          ("parley-worker", shown)}
    assert chat["gen_ai.usage.input_tokens"] > 0 and chat["gen_ai.usage.output_tokens"] > 0
    assert "gen_ai.usage.cache_read.input_tokens" in chat
    tool = next(s for s in spans if s.name == "execute_tool look").attributes
    assert tool["gen_ai.tool.name"] == "look" and tool["gen_ai.tool.call.id"].startswith("call_")
    # The conventions' opt-in is off: the player's words (and the model's) are on no span, in no process.
    everything = json.dumps([s.attributes for s in receiver.spans])
    assert WORDS not in everything and "gen_ai.input.messages" not in everything


@pytest.mark.parametrize("pool", ["threads", "gevent", "prefork"])
def test_a_retry_after_a_sigkill_mid_turn_is_a_new_span_in_the_same_trace(
        cluster: Cluster, receiver: OtlpReceiver, pool: str) -> None:
    first_call, killed = hold_first_request(cluster.llm)  # the busy worker's turn is in flight until it dies
    traced_worker(cluster, receiver, "busy", pool=pool, concurrency=2)
    busy = cluster.workers[-1]
    with tracing.span("game engine request") as outer:  # a producer's own trace: the input continues it
        outer.set("test", True)
        cluster.client().send_message(PLAYER, "are you there?", message_id="m1")
    assert wait_until(first_call.is_set, 60), busy.log()
    tid = accept_of(receiver, "m1").trace_id
    busy.kill(signal.SIGKILL)
    killed.set()
    traced_worker(cluster, receiver, "spare", pool=pool, concurrency=2)
    assert wait_until(lambda: len(cluster.whatsapp.texts_for(PLAYER)) == 1, 60), cluster.workers[-1].log()
    assert receiver.wait_for(lambda: "send" in names_in(receiver, tid), 20), names_in(receiver, tid)
    tracing.flush()
    spans = receiver.trace(tid)
    [drain] = [s for s in spans if s.name == "drain"]  # the killed attempt's never ended: never exported
    assert drain.resource["service.instance.id"] == "spare" and drain.attributes["parley.attempt"] >= 2
    [queue] = [s for s in spans if s.name == "queue"]  # from the accept to the attempt that applied it
    assert queue.resource["service.instance.id"] == "spare" and queue.end_ns <= drain.start_ns + 1_000_000
    assert {s.name for s in spans} >= {"game engine request", "accept", "queue", "drain", "turn",
                                       "chat gpt-4o-mini", "commit", "send"}
    by_id = {s.span_id: s for s in spans}
    assert all(not s.parent or s.parent in by_id for s in spans)
    assert [s.name for s in spans if not s.parent] == ["game engine request"]


@pytest.mark.parametrize("cluster", [{"env": {"PARLEY_BURST_QUIET_SECONDS": "1.5"}}], indirect=True)
def test_a_burst_turn_links_the_traces_of_both_messages(cluster: Cluster, receiver: OtlpReceiver) -> None:
    traced_worker(cluster, receiver, "w1")
    ingress = IngressServer(cluster.client(), app_secret=SECRET).start()
    try:
        post(ingress, "wamid.B1", "wait")
        post(ingress, "wamid.B2", "which way?")
        assert wait_until(lambda: len(cluster.whatsapp.texts_for(PLAYER)) == 1, 60), cluster.workers[0].log()
    finally:
        ingress.stop()
    tracing.flush()
    first, second = accept_of(receiver, "wamid.B1"), accept_of(receiver, "wamid.B2")
    assert first.trace_id != second.trace_id  # one trace per input
    assert receiver.wait_for(lambda: receiver.named("turn"), 20)
    [turn] = receiver.named("turn")
    assert turn.trace_id == first.trace_id and turn.attributes["parley.turn.inputs"] == 2
    assert sorted(turn.links) == sorted([(first.trace_id, first.span_id), (second.trace_id, second.span_id)])
    assert len(cluster.llm.requests) == 1
