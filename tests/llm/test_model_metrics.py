"""What the dashboard and the alerts read of the model calls: each HTTP request timed by provider, each failure
counted by provider and kind, and the breaker of each endpoint as a gauge (1 from its opening to the next success),
driven through real providers against a loopback server."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import pytest
from prometheus_client import REGISTRY

from tests.llm.servers import ScriptedServer, error, openai_text
from worker.conversation import Message, ModelRequest
from worker.errors import AuthenticationError, CircuitOpenError, ModelResponseError, ModelUnavailableError
from worker.llm import build_model
from worker.llm.transport import RetryPolicy

REQUEST = ModelRequest(system=None, messages=[Message(role="user", content="hi")])


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _errors(kind: str) -> float:
    return _sample("parley_model_errors_total", provider="openai", error=kind)


def _requests() -> float:
    return _sample("parley_model_request_seconds_count", provider="openai")


def test_each_request_is_timed_and_each_failure_counted_by_kind(server: ScriptedServer) -> None:
    model = build_model("openai", model="m", base_url=server.url + "/v1", api_key="k",
                        retry=RetryPolicy(max_retries=1, sleep=lambda _: None), breaker_threshold=100)
    before = {k: _errors(k) for k in ("auth", "unavailable", "response", "rate_limited")}
    requests = _requests()
    server.push(error(503, "down"), openai_text("ok"))
    assert model.complete(REQUEST).message.content == "ok"
    server.push(error(401, "bad key", "invalid_api_key"))
    with pytest.raises(AuthenticationError):
        model.complete(REQUEST)
    server.push((200, {"choices": "not a list"}, {}))
    with pytest.raises(ModelResponseError):
        model.complete(REQUEST)
    assert _requests() == requests + 4  # the retry is a request of its own
    assert {k: _errors(k) - before[k] for k in before} == {"auth": 1, "unavailable": 1, "response": 1,
                                                            "rate_limited": 0}


def test_the_breaker_gauge_is_one_while_the_endpoint_is_open(server: ScriptedServer) -> None:
    model = build_model("openai", model="m", base_url=server.url + "/v1", api_key="k",
                        retry=RetryPolicy(max_retries=0), breaker_threshold=2, breaker_reset=0.2)
    endpoint = urlsplit(server.url).netloc

    def gauge() -> float | None:
        return REGISTRY.get_sample_value("parley_model_breaker_open", {"provider": "openai", "endpoint": endpoint})

    assert gauge() == 0  # known, closed, from the model's first use
    server.push(error(500, "down"), error(500, "down"))
    for _ in range(2):
        with pytest.raises(ModelUnavailableError):
            model.complete(REQUEST)
    assert gauge() == 1
    circuit_open, requests = _errors("circuit_open"), _requests()
    with pytest.raises(CircuitOpenError):
        model.complete(REQUEST)
    assert _errors("circuit_open") == circuit_open + 1 and _requests() == requests  # refused without a request
    time.sleep(0.25)
    server.push(openai_text("back"))
    assert model.complete(REQUEST).message.content == "back"  # the probe succeeds: closed
    assert gauge() == 0


def test_an_endpoint_with_credentials_in_its_url_is_labelled_by_host_and_port_only(server: ScriptedServer) -> None:
    host = urlsplit(server.url).netloc
    build_model("openai", model="m", base_url=f"http://user:secret@{host}/v1", api_key="k")
    labelled = [s.labels for m in REGISTRY.collect() if m.name == "parley_model_breaker_open" for s in m.samples]
    assert {"provider": "openai", "endpoint": host} in labelled
    assert not any("secret" in s["endpoint"] for s in labelled)
