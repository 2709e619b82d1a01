"""The producers' side of a trace: the HTTP API continues a caller's own trace (its W3C ``traceparent`` header),
whether the accept runs in a worker thread (the client) or on the event loop (the prepared path the inlet shares),
and the envelope in the mailbox carries the accept's context on."""

from __future__ import annotations

import fakeredis
import pytest
from starlette.testclient import TestClient

from tests.support.otlp_receiver import OtlpReceiver
from tests.support.redis_server import RedisServer, redis_of_its_own
from worker import tracing
from worker.async_client import AsyncClient
from worker.client import ConversationClient
from worker.envelopes import decode_envelope
from worker.ingress.app import create_app
from worker.prepared import Preparer
from worker.store.redis_store import ConversationStore
from worker.tracing.context import trace_id

CID = "447700900123"
CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
server = pytest.fixture(redis_of_its_own)


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
    assert accept.parent == request.span_id
    assert stored is not None and stored[36:52] == accept.span_id  # the envelope holds the accept's context


def test_the_api_continues_the_callers_trace_through_a_thread(traced: OtlpReceiver) -> None:
    store = ConversationStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix="t")
    _accept_through_the_api(store, traced)


def test_the_api_continues_the_callers_trace_on_the_event_loop(traced: OtlpReceiver, server: RedisServer) -> None:
    store = ConversationStore(server.client(), prefix="t")
    assert AsyncClient.for_client(ConversationClient(store, wake=lambda cid: None)) is not None  # the loop's path
    _accept_through_the_api(store, traced)


def test_a_prepared_input_carries_no_trace_when_tracing_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    client = ConversationClient(ConversationStore(fakeredis.FakeRedis(), prefix="t"), wake=lambda cid: None)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    tracing.reset_for_tests()
    assert not tracing.enabled()
    off = Preparer(client).prepare("send_message", CID, {"text": "hi"})
    assert off.envelope.traceparent is None
