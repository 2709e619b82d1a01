"""HTTP plumbing shared by the providers: one pooled client per process and base URL, retries with
backoff and jitter that honour ``Retry-After``, a circuit breaker per provider endpoint, and the mapping of
HTTP failures to :mod:`worker.errors` types.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
from prometheus_client import Counter, Gauge, Histogram

from worker import metrics
from worker.errors import (
    AuthenticationError,
    CircuitOpenError,
    ContextLengthError,
    ModelError,
    ModelRequestError,
    ModelResponseError,
    ModelTimeoutError,
    ModelUnavailableError,
    RateLimitedError,
)
from worker.http.pool import ClientPool, turn_client
from worker.http.retry_after import parse_retry_after

log = logging.getLogger("parley.llm")

_clients: dict[str, ClientPool] = {}
_clients_lock = threading.Lock()


def shared_clients(base_url: str) -> ClientPool:
    """The process's pool of clients for ``base_url``, shared by every model that calls it (see
    :mod:`worker.http.pool`: a request leases a client; the pool starts empty again after a fork)."""
    pool = _clients.get(base_url)
    if pool is None:
        with _clients_lock:
            pool = _clients.get(base_url)
            if pool is None:
                pool = _clients[base_url] = ClientPool(lambda: turn_client(
                    base_url=base_url, timeout=httpx.Timeout(60.0, connect=5.0)))
    return pool


class CircuitBreaker:
    """Closed -> open after ``threshold`` consecutive failures; open -> half-open after ``reset_after``
    seconds, when one probe is let through; the probe's success closes it, its failure opens it again."""

    def __init__(self, threshold: int = 5, reset_after: float = 30.0, clock: Callable[[], float] = time.monotonic,
                 gauge: Gauge | None = None) -> None:
        self.threshold = threshold
        self.gauge = gauge  # parley_model_breaker_open of its endpoint: 1 from the opening to the next success
        self.reset_after = reset_after
        self.clock = clock
        self.failures = 0
        self.opened_at: float | None = None
        self.probing = False
        self._lock = threading.Lock()

    @property
    def state(self) -> str:
        if self.opened_at is None:
            return "closed"
        return "half-open" if self.probing or self.clock() - self.opened_at >= self.reset_after else "open"

    def before_call(self, name: str) -> bool:
        """Raise :class:`CircuitOpenError` while the circuit is open; True when this caller is the probe."""
        with self._lock:
            if self.opened_at is None:
                return False
            if self.clock() - self.opened_at < self.reset_after or self.probing:
                wait = max(0.0, self.reset_after - (self.clock() - self.opened_at))
                raise CircuitOpenError(f"{name}: circuit open after {self.failures} failures; not calling",
                                       provider=name, retry_after=wait or self.reset_after)
            self.probing = True
            return True

    def abandon_probe(self) -> None:
        """The probe ended without an answer either way (an exception no handler expected): reopen the circuit
        so that, after ``reset_after``, another caller may probe; left ``probing``, it would refuse for ever."""
        with self._lock:
            if self.probing:
                self.opened_at = self.clock()
                self.probing = False

    def success(self) -> None:
        with self._lock:
            if self.opened_at is not None and self.gauge is not None:
                self.gauge.set(0)
            self.failures = 0
            self.opened_at = None
            self.probing = False

    def failure(self) -> None:
        with self._lock:
            self.failures += 1
            if self.probing or self.failures >= self.threshold:
                self.opened_at = self.clock()
                if self.gauge is not None:
                    self.gauge.set(1)
            self.probing = False


_breakers: dict[str, CircuitBreaker] = {}
_breakers_lock = threading.Lock()


def breaker_for(key: str, threshold: int, reset_after: float) -> CircuitBreaker:
    """The process's breaker for ``key`` (``<provider>:<base URL>``), made on first use with its gauge."""
    with _breakers_lock:
        b = _breakers.get(key)
        if b is None:
            provider, _, base_url = key.partition(":")
            # The endpoint as host[:port] only: a base URL may carry credentials, never a label.
            endpoint = urlsplit(base_url).netloc.rpartition("@")[2] or base_url
            b = _breakers[key] = CircuitBreaker(threshold, reset_after,
                                                gauge=metrics.BREAKER_OPEN.labels(provider, endpoint))
        return b


# The error label of parley_model_errors_total: the most specific class first (they subclass one another).
_ERROR_KINDS: tuple[tuple[type[ModelError], str], ...] = (
    (AuthenticationError, "auth"), (ContextLengthError, "context_length"), (ModelRequestError, "request"),
    (RateLimitedError, "rate_limited"), (ModelTimeoutError, "timeout"), (CircuitOpenError, "circuit_open"),
    (ModelUnavailableError, "unavailable"), (ModelResponseError, "response"))


@dataclass
class _Counted:
    """A provider's metric children, bound once: looking a labelled child up costs more than the update."""

    seconds: Histogram
    errors: dict[str, Counter] = field(default_factory=dict)

    def failed(self, provider: str, err: ModelError) -> None:
        """Count ``err`` in parley_model_errors_total."""
        kind = next((k for cls, k in _ERROR_KINDS if isinstance(err, cls)), "error")
        child = self.errors.get(kind)
        if child is None:  # two threads may both bind it: labels() hands both the same child
            child = self.errors[kind] = metrics.MODEL_ERRORS.labels(provider, kind)
        child.inc()


_counted: dict[str, _Counted] = {}


def _counted_for(provider: str) -> _Counted:
    counted = _counted.get(provider)
    if counted is None:
        counted = _counted[provider] = _Counted(metrics.MODEL_REQUEST_SECONDS.labels(provider))
    return counted


def count_model_error(provider: str, err: ModelError) -> None:
    """Count a failure found after the request (an answer that does not parse) as the request's own are."""
    _counted_for(provider).failed(provider, err)


def _message_of(body: Any, text: str) -> tuple[str, str]:
    """(message, type/code) from an OpenAI- or Anthropic-style error body."""
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            kind = str(err.get("code") or err.get("type") or "")
            return str(err.get("message") or text[:500]), kind
        if isinstance(err, str):
            return err, ""
        if isinstance(body.get("message"), str):
            return str(body["message"]), str(body.get("type", ""))
    return text[:500] or "no error message", ""


def _error_for_status(provider: str, status: int, body: Any, text: str, headers: httpx.Headers) -> ModelError:
    """Map an HTTP error answer to a typed error carrying the provider's message."""
    message, kind = _message_of(body, text)
    full = f"{provider} answered {status}: {message}"
    retry_after = parse_retry_after(headers.get("retry-after"))
    low = f"{message} {kind}".lower()
    if ("context_length" in low or "maximum context length" in low or "prompt is too long" in low
            or "context window" in low):
        return ContextLengthError(full, provider=provider, status=status)
    if status in (401, 403):  # a rejected key, or one without access to the model: no retry mends it
        return AuthenticationError(full, provider=provider, status=status)
    if status == 429 or status == 529 or "overloaded" in low or "rate_limit" in low:
        return RateLimitedError(full, provider=provider, status=status, retry_after=retry_after)
    if status in (408, 409, 425) or status >= 500:
        return ModelUnavailableError(full, provider=provider, status=status, retry_after=retry_after)
    return ModelRequestError(full, provider=provider, status=status)


@dataclass
class RetryPolicy:
    """Bounded retries with exponential backoff and full jitter. A ``Retry-After`` longer than
    ``max_wait`` is not slept through: the error is raised with ``retry_after`` so the worker retries later
    without holding a thread."""

    max_retries: int = 2
    base: float = 0.5
    cap: float = 8.0
    max_wait: float = 20.0
    sleep: Callable[[float], None] = field(default=time.sleep)

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return retry_after
        return random.uniform(0, min(self.cap, self.base * 2.0**attempt))


def post_json(
    *,
    provider: str,
    clients: ClientPool,
    path: str,
    body: dict[str, Any],
    headers: dict[str, str],
    timeout: httpx.Timeout,
    retry: RetryPolicy,
    breaker: CircuitBreaker,
) -> dict[str, Any]:
    """POST ``body`` and return the JSON answer, retrying what can be retried; raises typed errors only."""
    attempt = 0
    counted = _counted_for(provider)
    while True:
        try:
            probe = breaker.before_call(provider)
        except CircuitOpenError as exc:
            counted.failed(provider, exc)
            raise
        started = time.perf_counter()
        try:
            answer = _post_once(provider, clients, path, body, headers, timeout)
        except BaseException:
            if probe:
                breaker.abandon_probe()
            raise
        finally:
            counted.seconds.observe(time.perf_counter() - started)
        if isinstance(answer, dict):
            breaker.success()
            return answer
        err = answer
        counted.failed(provider, err)
        if not err.retryable:
            breaker.success()  # the service answered; it is our request that is wrong
            raise err
        breaker.failure()
        log.warning("model call failed", extra={"provider": provider, "error": str(err), "attempt": attempt})
        retry_after = getattr(err, "retry_after", None)
        if attempt >= retry.max_retries or (retry_after is not None and retry_after > retry.max_wait):
            raise err
        retry.sleep(retry.delay(attempt, retry_after))
        attempt += 1


def _post_once(provider: str, clients: ClientPool, path: str, body: dict[str, Any], headers: dict[str, str],
               timeout: httpx.Timeout) -> dict[str, Any] | ModelError:
    """One POST: the JSON object answered, or the typed error it maps to (httpx failures included)."""
    try:
        with clients.lease() as client:
            response = client.post(path, json=body, headers=headers, timeout=timeout)
            raw = response.content
    except httpx.TimeoutException as exc:
        return ModelTimeoutError(f"{provider} did not answer in time ({type(exc).__name__})", provider=provider)
    except httpx.HTTPError as exc:
        return ModelUnavailableError(f"{provider} unreachable: {type(exc).__name__}: {exc}", provider=provider)
    parsed: Any
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = None
    if response.status_code == 200:
        if isinstance(parsed, dict):
            return parsed
        return ModelResponseError(f"{provider} answered 200 with a body that is not a JSON object "
                                  f"({raw[:120]!r})", provider=provider, status=200)
    return _error_for_status(provider, response.status_code, parsed, raw.decode("utf-8", "replace"), response.headers)
