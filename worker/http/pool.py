"""Outbound HTTP clients for the LLM providers and WhatsApp: one lease per request from a LIFO pool of
single-connection clients, per process and endpoint.

Why not one shared ``httpx.Client`` with a big pool (or a few shards of one): httpcore's sync pool walks every
connection it holds on each request and again on each response, under one lock, and probes every idle
connection's socket with a system call as it goes (``has_expired``). With hundreds of turns waiting on a slow
model, one pool holds hundreds of connections and those walks were most of the worker's CPU (measured: 25 ms
per turn with 600 threads on one pool; 32 shards brought it to 11 ms, still with the walk on top of the
profile). And the pool can close a keep-alive connection it has already handed to a queued request, which then
fails with "Bad file descriptor" or hangs until its read timeout (httpcore issue 1110).

So a request leases a whole client that holds at most one connection and nobody else uses meanwhile: the walk
is over one connection, no request ever queues inside httpcore, and the lease itself is a list pop. The pool
is LIFO: at low traffic the same few clients, with warm keep-alive connections, serve every request (a round
robin over many would find each one's connection expired and pay a new TCP and TLS handshake); at high
traffic it grows to the number of requests in flight at once. This works the same under the threads pool and
under gevent, where a task's greenlet is new for every task and a per-thread choice would not stick.

All clients of a process share one TLS context, so a new client costs no certificate loading. After a fork the
pool starts empty: sockets must not be shared between processes.

The requests every turn makes (the model call, the WhatsApp send and read mark) go through :func:`turn_client`:
an httpx Client over :class:`worker.http.lean_transport.LeanTransport` (the standard library's ``http.client`` under
httpx's own API and exceptions; ``PARLEY_HTTP_CLIENT=httpx`` puts httpx's default transport back).
"""

from __future__ import annotations

import os
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.request import getproxies

import httpx

from worker.http.lean_transport import LeanTransport

# Idle clients kept beyond this are closed: a burst should not leave thousands of sockets open for good.
MAX_IDLE = 2048
# A client idle this long is closed when another is given back. httpx drops a keep-alive connection idle for
# 5 s anyway, so such a client is a shell; keeping the shells made the pool (about 20 KB a client) grow to
# the highest burst a process ever saw, which showed as a slow creep of worker memory under load.
IDLE_SECONDS = 5.0

_ssl: ssl.SSLContext | None = None
_ssl_lock = threading.Lock()


_lean = True


def use_lean_transport(on: bool) -> None:
    """Whether :func:`turn_client` builds clients over the lean transport (the worker sets it from
    ``PARLEY_HTTP_CLIENT`` when it starts; on by default)."""
    global _lean
    _lean = on


def turn_client(*, transport: httpx.BaseTransport | None = None, **options: object) -> httpx.Client:
    """A single-connection client for a turn's own requests: over the lean transport unless ``transport`` is given
    (tests inject theirs), the lean one is turned off, or the environment names a proxy (``HTTPS_PROXY`` and the
    like: httpx's own transport goes through it). ``options`` are httpx.Client's (timeout, headers, ...)."""
    # httpx reads the environment's proxies only for a Client with its own transport: with a proxy set, keep it.
    if transport is None and _lean and not any(k in ("http", "https", "all") for k in getproxies()):
        transport = LeanTransport(tls_context)
    return TurnClient(limits=single_connection(), verify=tls_context(), transport=transport,
                      **options)  # type: ignore[arg-type]


class TurnClient(httpx.Client):
    """httpx's Client, whose answers (read whole, as a turn's requests are) are freed as soon as their last user
    lets go of them.

    httpx binds a response's body stream to the response (the stream holds the response, the response the stream),
    a reference cycle that only the cyclic garbage collector frees, with the request, URL and headers hanging off
    it: about 35 objects a request, three requests a turn, and every one pushed the worker towards its next
    collection. Once the body is read the stream is spent, so it is replaced by the body itself, as httpx does for a
    request it has read (``Request.read``).

    And it keeps no cookies: the APIs a turn calls (the model's, WhatsApp's) are authenticated by their headers, and
    a cookie one answer set would come back only on the requests that happen to lease the same pooled client. httpx
    turned every answer into the standard library's cookie-jar request and response to look for a ``Set-Cookie``
    (about 3% of a busy worker's CPU)."""

    def __init__(self, **options: Any) -> None:
        self._turn_cookies = _NoCookies()
        super().__init__(**options)

    @property  # type: ignore[override]
    def cookies(self) -> httpx.Cookies:
        return self._turn_cookies

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        """A turn client's cookies stay empty (httpx's own initialiser sets them)."""

    def send(self, request: httpx.Request, *, stream: bool = False, **kwargs: Any) -> httpx.Response:
        response = super().send(request, stream=stream, **kwargs)
        if not stream:
            response.stream = httpx.ByteStream(response.content)
        return response


class _NoCookies(httpx.Cookies):
    """An empty cookie jar that answers do not fill."""

    def extract_cookies(self, response: httpx.Response) -> None:
        """Ignores the answer's ``Set-Cookie``."""


def single_connection() -> httpx.Limits:
    """One connection per client: a client is leased to one request at a time (see the module docstring)."""
    return httpx.Limits(max_connections=1, max_keepalive_connections=1)


def tls_context() -> ssl.SSLContext:
    """The process's TLS context (certificate verification on, built once)."""
    global _ssl
    with _ssl_lock:
        if _ssl is None:
            _ssl = ssl.create_default_context()
            try:
                import certifi

                _ssl.load_verify_locations(certifi.where())
            except ImportError:  # pragma: no cover - certifi comes with httpx
                pass
        return _ssl


class ClientPool:
    """Clients made by ``factory`` (each with :func:`single_connection` limits), leased one request at a time.

    ``with pool.lease() as client: client.post(...)`` -- read the response inside the block: the connection
    goes back to the pool with the client.
    """

    def __init__(self, factory: Callable[[], httpx.Client], max_idle: int = MAX_IDLE,
                 idle_seconds: float = IDLE_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._factory = factory
        self._max_idle = max_idle
        self._idle_seconds = idle_seconds
        self._clock = clock
        self._idle: deque[tuple[float, httpx.Client]] = deque()  # (given back at, client); newest on the right
        self._lock = threading.Lock()
        self._pid = os.getpid()

    @contextmanager
    def lease(self) -> Iterator[httpx.Client]:
        client = self._take()
        try:
            yield client
        finally:
            self._give_back(client)

    def idle(self) -> int:
        """Clients waiting for a request now."""
        return len(self._idle)

    def _take(self) -> httpx.Client:
        with self._lock:
            if self._pid != os.getpid():
                self._idle, self._pid = deque(), os.getpid()
            if self._idle:
                return self._idle.pop()[1]
        return self._factory()

    def _give_back(self, client: httpx.Client) -> None:
        stale: list[httpx.Client] = []
        with self._lock:
            now = self._clock()
            # LIFO: the longest idle are on the left.
            while self._idle and now - self._idle[0][0] > self._idle_seconds:
                stale.append(self._idle.popleft()[1])
            if self._pid == os.getpid() and len(self._idle) < self._max_idle:
                self._idle.append((now, client))
            else:
                stale.append(client)
        for stale_client in stale:
            stale_client.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, deque()
        for _, idle_client in idle:
            idle_client.close()
