"""The producers' side of a trace: the HTTP API continues a caller's own trace (its W3C ``traceparent`` header),
whether the accept runs in a worker thread (the client) or on the event loop (the path the inlet shares: checked apart, accepted in a batch);
the inlets continue the trace a queue message carries (the stream entry's ``traceparent`` field, the AMQP message's
header); and the envelope in the mailbox carries the accept's context on."""

from __future__ import annotations

import json

import fakeredis
import pytest
from kombu.connection import Connection
from kombu.messaging import Producer
from starlette.testclient import TestClient

from tests.inlet.test_amqp import QUEUE, Running, vhost
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.rabbitmq import Vhost
from tests.support.redis_server import RedisServer, redis_of_its_own
from worker.client import ConversationClient
from worker.client.async_client import AsyncClient
from worker.envelopes.inputs import decode_envelope
from worker.envelopes.trace_context import trace_id
from worker.ingress.app import create_app
from worker.inlet.amqp import inlet_queue
from worker.inlet.stream import Inlet
from worker.observability import tracing
from worker.store.redis_store import ConversationStore
from worker.testing import reset_tracing

CID = "447700900123"
CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
server = pytest.fixture(redis_of_its_own)
__all__ = ["vhost"]  # the RabbitMQ inlet's fixture: a vhost of the test's own


def _accept_through_the_api(store: ConversationStore, receiver: OtlpReceiver) -> None:
    client = ConversationClient(store, wake=lambda cid: None)
    http = TestClient(create_app(client, store, app_secret="s", verify_token="v", api_tokens="game-token"))
    r = http.post(f"/v1/conversations/{CID}/messages", json={"text": "Where next?", "message_id": "m1"},
                  headers={"Authorization": "Bearer game-token", "traceparent": CALLER})
    assert r.status_code == 202, r.text
    [(_, raw)] = store.inbox(CID)
    stored = decode_envelope(raw).traceparent
    assert trace_id(stored) == trace_id(CALLER)  # the worker's drain continues the caller's trace
    tracing.flush()
    assert receiver.wait_for(lambda: len(receiver.spans) >= 2, 10)
    [request] = receiver.named("POST send_message")
    [accept] = receiver.named("accept")
    assert request.parent == CALLER[36:52] and request.trace_id == trace_id(CALLER)
    assert request.attributes["parley.api.token"] == "PARLEY_API_TOKENS[0]"  # the token's name, never the token
    assert accept.parent == request.span_id
    assert stored is not None and stored[36:52] == accept.span_id  # the envelope holds the accept's context


def test_the_api_continues_the_callers_trace_through_a_thread(traced: OtlpReceiver) -> None:
    store = ConversationStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix="t")
    _accept_through_the_api(store, traced)


def test_the_api_continues_the_callers_trace_on_the_event_loop(traced: OtlpReceiver, server: RedisServer) -> None:
    store = ConversationStore(server.client(), prefix="t")
    assert AsyncClient.for_client(ConversationClient(store, wake=lambda cid: None)) is not None  # the loop's path
    _accept_through_the_api(store, traced)


@pytest.mark.parametrize("kind", ["message", "reset"])  # a plain input (batched), and one accepted alone
def test_the_stream_inlet_continues_the_trace_a_queue_message_carries(traced: OtlpReceiver, server: RedisServer,
                                                                      kind: str) -> None:
    r = server.client()
    store = ConversationStore(r, prefix="t")
    inlet = Inlet(r, ConversationClient(store, wake=lambda cid: None), "parley:inlet", "parley-inlet", "a",
                  block_ms=1, retry_seconds=0)
    inlet.ensure_group()
    body = {"kind": kind, "conversation_id": CID, **({"text": "where next?"} if kind == "message" else {})}
    r.xadd("parley:inlet", {"envelope": json.dumps(body), "traceparent": CALLER})
    assert inlet.step() == 1
    [(_, raw)] = store.inbox(CID)
    assert trace_id(decode_envelope(raw).traceparent) == trace_id(CALLER)
    tracing.flush()
    assert traced.wait_for(lambda: len(traced.named("accept")) == 1, 10)
    [entry] = traced.named("inlet")
    [accept] = traced.named("accept")
    assert entry.parent == CALLER[36:52] and accept.parent == entry.span_id


def test_the_amqp_inlet_continues_the_trace_a_message_header_carries(traced: OtlpReceiver, server: RedisServer,
                                                                     vhost: Vhost) -> None:
    store = ConversationStore(server.client(), prefix="q")
    with Connection(vhost.url, transport_options={"confirm_publish": True}) as conn:  # type: ignore[no-untyped-call]
        channel = conn.channel()  # type: ignore[no-untyped-call]
        inlet_queue(QUEUE)(channel).declare()  # type: ignore[no-untyped-call]
        Producer(channel).publish(  # type: ignore[no-untyped-call]
            json.dumps({"kind": "message", "conversation_id": CID, "text": "where?"}).encode(), routing_key=QUEUE,
            content_type="application/json", content_encoding="utf-8", headers={"traceparent": CALLER})
    running = Running(vhost.url, ConversationClient(store, wake=lambda cid: None))
    try:
        running.until(lambda: store.inbox_depth(CID) == 1)
    finally:
        running.close()
    [(_, raw)] = store.inbox(CID)
    assert trace_id(decode_envelope(raw).traceparent) == trace_id(CALLER)
    tracing.flush()
    assert traced.wait_for(lambda: len(traced.named("accept")) == 1, 10)
    [entry] = traced.named("inlet")
    assert entry.parent == CALLER[36:52] and traced.named("accept")[0].parent == entry.span_id


def test_an_input_accepted_apart_carries_no_trace_when_tracing_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    client = ConversationClient(ConversationStore(fakeredis.FakeRedis(), prefix="t"), wake=lambda cid: None)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    reset_tracing()
    assert not tracing.enabled()
    off = client.intake.traced(client.inputs.build("message", CID, {"text": "hi"}))
    assert off.envelope.traceparent is None


@pytest.mark.parametrize("authorization", [None, "Bearer not-a-token", "Basic game-token"])
def test_an_unauthenticated_request_never_joins_the_callers_trace(traced: OtlpReceiver,
                                                                   authorization: str | None) -> None:
    store = ConversationStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix="t")
    client = ConversationClient(store, wake=lambda cid: None)
    http = TestClient(create_app(client, store, app_secret="s", verify_token="v", api_tokens="game-token"))
    headers = {"traceparent": CALLER} | ({"Authorization": authorization} if authorization else {})
    r = http.post(f"/v1/conversations/{CID}/messages", json={"text": "Where next?"}, headers=headers)
    assert r.status_code == 401
    known = http.post(f"/v1/conversations/{CID}/reset", headers={"Authorization": "Bearer game-token",
                                                                  "traceparent": CALLER})
    assert known.status_code == 202  # a known token's request goes on with the caller's trace: the export is done
    tracing.flush()
    assert traced.wait_for(lambda: bool(traced.named("POST reset")), 10)
    [refused] = traced.named("POST send_message")
    assert refused.parent == "" and refused.trace_id != trace_id(CALLER)
    assert [s.name for s in traced.trace(trace_id(CALLER) or "") if s.name.startswith("POST")] == ["POST reset"]
