"""The circuit breaker around provider calls, driven through ``post_json`` with a fake clock."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx
import pytest

from tests.llm.servers import ScriptedServer, error, openai_text
from worker.conversation import Message, ModelRequest
from worker.errors import CircuitOpenError, ModelUnavailableError
from worker.http.pool import ClientPool
from worker.llm import build_model
from worker.llm.transport import CircuitBreaker, RetryPolicy, post_json


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FailingPool(ClientPool):
    """A pool whose lease raises what the test sets: an httpx error, or something no handler expects."""

    def __init__(self) -> None:
        super().__init__(lambda: httpx.Client())
        self.raise_next: BaseException = httpx.ConnectError("refused")
        self.calls = 0

    @contextlib.contextmanager
    def lease(self) -> Iterator[httpx.Client]:
        self.calls += 1
        raise self.raise_next
        yield  # pragma: no cover


def _call(pool: FailingPool, breaker: CircuitBreaker) -> None:
    post_json(provider="openai", clients=pool, path="http://127.0.0.1:9/x", body={}, headers={},
              timeout=httpx.Timeout(1.0), retry=RetryPolicy(max_retries=0), breaker=breaker)


def _open(pool: FailingPool, breaker: CircuitBreaker) -> None:
    for _ in range(breaker.threshold):
        with pytest.raises(ModelUnavailableError):
            _call(pool, breaker)
    assert breaker.state == "open"


@pytest.mark.parametrize("unexpected", [RuntimeError("bug in a hook"), UnicodeEncodeError("ascii", "é", 0, 1, "x"),
                                        KeyboardInterrupt()])
def test_a_probe_that_raises_something_unexpected_does_not_stick_the_breaker_open(unexpected: BaseException) -> None:
    clock, pool = Clock(), FailingPool()
    breaker = CircuitBreaker(threshold=2, reset_after=30.0, clock=clock)
    _open(pool, breaker)
    clock.now += 31
    pool.raise_next = unexpected
    with pytest.raises(type(unexpected)):
        _call(pool, breaker)  # the probe
    assert not breaker.probing
    assert breaker.state == "open"  # an unknown outcome counts against the provider: wait once more
    with pytest.raises(CircuitOpenError):
        _call(pool, breaker)
    clock.now += 31
    pool.raise_next = httpx.ConnectError("still down")
    calls = pool.calls
    with pytest.raises(ModelUnavailableError):
        _call(pool, breaker)  # a new probe is let through
    assert pool.calls == calls + 1


def test_an_unexpected_error_outside_a_probe_leaves_the_breaker_closed() -> None:
    clock, pool = Clock(), FailingPool()
    breaker = CircuitBreaker(threshold=2, reset_after=30.0, clock=clock)
    pool.raise_next = RuntimeError("bug")
    for _ in range(5):
        with pytest.raises(RuntimeError):
            _call(pool, breaker)
    assert breaker.state == "closed"
    assert breaker.failures == 0


@pytest.mark.parametrize("value", ["inf", "nan", "soon", "1e999"])
def test_a_provider_retry_after_that_is_not_a_time_is_ignored(server: ScriptedServer, value: str) -> None:
    slept: list[float] = []
    server.push(error(429, "slow down", "rate_limit_exceeded", {"Retry-After": value}), openai_text("ok"))
    model = build_model("openai", model="m", base_url=server.url + "/v1", api_key="k",
                        retry=RetryPolicy(max_retries=1, sleep=slept.append), breaker_threshold=100)
    request = ModelRequest(system=None, messages=[Message(role="user", content="hi")])
    assert model.complete(request).message.content == "ok"
    assert len(slept) == 1 and 0.0 <= slept[0] <= 8.0  # the jittered backoff, not an endless or NaN sleep
