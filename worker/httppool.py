"""Outbound HTTP clients for the LLM providers and WhatsApp: pooled, per process, sharded by thread.

Two things about httpcore's sync connection pool shape this module:

- Every request and every response walks the pool's connection and request lists under one lock. With hundreds
  of turns waiting on a slow model in one process, one pool holds hundreds of connections and those walks
  dominate the worker's CPU (measured: 25 ms of CPU per turn with 600 threads on one pool, against 10 ms at
  16 threads). So each process keeps ``SHARDS`` clients per endpoint and a thread always uses the same one:
  a pool then holds a few dozen connections at most.
- The pool can close a keep-alive connection it has already handed to a queued request, which then fails with
  "Bad file descriptor" or hangs until its read timeout (httpcore issue 1110). So no pool ever holds surplus
  connections (keep-alive limit = connection limit) and none is small enough for a request to queue.

The shards share one TLS context, so a new client costs no certificate loading.
"""

from __future__ import annotations

import itertools
import os
import ssl
import threading
from collections.abc import Callable

import httpx

SHARDS = 32
MAX_CONNECTIONS = 1024

_ssl: ssl.SSLContext | None = None
_ssl_lock = threading.Lock()


def pool_limits() -> httpx.Limits:
    return httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS)


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


class ClientShards:
    """``SHARDS`` clients made by ``factory``; :meth:`get` returns the calling thread's. Rebuilt after a fork
    (sockets must not be shared between processes)."""

    def __init__(self, factory: Callable[[], httpx.Client], shards: int = SHARDS) -> None:
        self._factory = factory
        self._n = max(1, shards)
        self._clients: list[httpx.Client | None] = [None] * self._n
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._slot = threading.local()
        self._turn = itertools.count()

    def get(self) -> httpx.Client:
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    self._clients = [None] * self._n
                    self._pid = os.getpid()
        i: int | None = getattr(self._slot, "i", None)
        if i is None:  # a thread's first request: hand out shards in turn (thread ids are aligned addresses)
            i = self._slot.i = next(self._turn) % self._n
        client = self._clients[i]
        if client is None:
            with self._lock:
                client = self._clients[i]
                if client is None:
                    client = self._clients[i] = self._factory()
        return client

    def close(self) -> None:
        with self._lock:
            for c in self._clients:
                if c is not None:
                    c.close()
            self._clients = [None] * self._n
