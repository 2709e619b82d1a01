"""An httpx transport over the standard library's ``http.client``: one keep-alive HTTP/1.1 connection, for the
requests every turn makes (the model call, the WhatsApp send and read mark).

Why: under the LLM-bound load a turn's three POSTs were most of the worker's CPU that was not Celery's. Measured
on loopback (``bench/http_overhead.py``), a POST through httpx's default transport (httpcore and h11) costs about
2.5x the CPU of the same POST through ``http.client``; the Client above it (headers, cookies, auth, redirects,
hooks) stays, so the requests are built, timed out and classified exactly as before: this transport raises httpx's
own exceptions (``ConnectTimeout``, ``ReadTimeout``, ``WriteTimeout``, ``ConnectError``, ``ReadError``,
``WriteError``, ``RemoteProtocolError``), which is what the callers' error classification reads.

Scope, deliberately small: a client leased from :class:`worker.http.pool.ClientPool` (one request at a time, so one
connection and no locking); bodies read whole (no streaming); HTTP/1.1 only; no proxy (httpx ignores the
environment's proxies for a Client given a transport, so :func:`worker.http.pool.turn_client` keeps httpx's own
transport when ``HTTPS_PROXY`` or the like is set). A kept-alive connection the server has closed meanwhile is noticed before reuse (its socket reads as ready,
as httpcore checks it) and replaced, never written to; any failure closes the connection.
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
from collections.abc import Callable

import httpx

_Origin = tuple[bytes, str, int]


class _OneWrite(http.client.HTTPConnection):
    """A connection that writes a request's head and body in one system call (http.client writes them apart)."""

    def _send_output(self, message_body: object = None, encode_chunked: bool = False) -> None:
        if not isinstance(message_body, bytes) or encode_chunked:
            super()._send_output(message_body, encode_chunked)  # type: ignore[misc]
            return
        buffer: list[bytes] = self._buffer  # type: ignore[attr-defined]
        buffer.extend((b"", message_body))  # the blank line after the headers, then the body
        request = b"\r\n".join(buffer)
        del buffer[:]
        self.send(request)


class _Http(_OneWrite):
    pass


class _Https(_OneWrite, http.client.HTTPSConnection):
    pass


class LeanTransport(httpx.BaseTransport):
    """One keep-alive connection at a time, to whichever origin the request names (https with ``tls``)."""

    def __init__(self, tls: Callable[[], ssl.SSLContext]) -> None:
        self._tls = tls
        self._conn: http.client.HTTPConnection | None = None
        self._origin: _Origin | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions.get("timeout", {})
        conn = self._connection(request.url, timeouts.get("connect"))
        try:
            self._send(conn, request, timeouts.get("write"))
            return self._receive(conn, request, timeouts.get("read"))
        except BaseException:
            self.close()
            raise

    def _connection(self, url: httpx.URL, connect_timeout: float | None) -> http.client.HTTPConnection:
        origin = (url.raw_scheme, url.host, url.port or (443 if url.raw_scheme == b"https" else 80))
        conn = self._conn
        if conn is not None and (origin != self._origin or conn.sock is None or _closed_by_peer(conn.sock)):
            self.close()
            conn = None
        if conn is None:
            if origin[0] == b"https":
                conn = _Https(origin[1], origin[2], timeout=connect_timeout, context=self._tls())
            elif origin[0] == b"http":
                conn = _Http(origin[1], origin[2], timeout=connect_timeout)
            else:
                raise httpx.UnsupportedProtocol(f"no transport for {url.scheme!r} URLs")
            try:
                conn.connect()
            except TimeoutError as exc:
                raise httpx.ConnectTimeout(str(exc) or "connect timed out") from exc
            except OSError as exc:  # refused, unreachable, the TLS handshake (ssl.SSLError is an OSError)
                raise httpx.ConnectError(f"{type(exc).__name__}: {exc}") from exc
            self._conn, self._origin = conn, origin
        return conn

    @staticmethod
    def _send(conn: http.client.HTTPConnection, request: httpx.Request, write_timeout: float | None) -> None:
        assert conn.sock is not None
        conn.sock.settimeout(write_timeout)
        try:
            conn.putrequest(request.method, request.url.raw_path.decode("ascii"), skip_host=True,
                            skip_accept_encoding=True)
            for name, value in request.headers.raw:  # Host, Content-Length and the rest, as httpx built them
                conn.putheader(name, value)
            conn.endheaders(request.read())
        except TimeoutError as exc:
            raise httpx.WriteTimeout(str(exc) or "write timed out", request=request) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise httpx.WriteError(f"{type(exc).__name__}: {exc}", request=request) from exc

    @staticmethod
    def _receive(conn: http.client.HTTPConnection, request: httpx.Request, read_timeout: float | None) -> httpx.Response:
        assert conn.sock is not None
        conn.sock.settimeout(read_timeout)
        try:
            answer = conn.getresponse()
            content = answer.read()
        except TimeoutError as exc:
            raise httpx.ReadTimeout(str(exc) or "read timed out", request=request) from exc
        except http.client.HTTPException as exc:  # the server hung up before answering, or a malformed answer
            raise httpx.RemoteProtocolError(f"{type(exc).__name__}: {exc}", request=request) from exc
        except OSError as exc:
            raise httpx.ReadError(f"{type(exc).__name__}: {exc}", request=request) from exc
        return httpx.Response(answer.status, headers=answer.getheaders(), content=content,
                              extensions={"http_version": b"HTTP/1.1",
                                          "reason_phrase": answer.reason.encode("ascii", "replace")})

    def close(self) -> None:
        conn, self._conn, self._origin = self._conn, None, None
        if conn is not None:
            conn.close()


def _original_poll() -> Callable[[], select.poll]:
    """The system's ``poll``, also under gevent's monkey-patching: a zero-timeout check never blocks, so it needs no
    hub switch (gevent's ``select`` makes one per call); and unlike ``select`` it takes descriptors past 1,023,
    which a worker with a thousand turns in flight has."""
    try:
        from gevent.monkey import get_original  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - gevent is a dependency
        return select.poll
    return get_original("select", "poll")  # type: ignore[no-any-return]


_poll = _original_poll()


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether an idle keep-alive socket reads as ready: the server closed it (or sent what nobody asked for)."""
    try:
        poller = _poll()
        poller.register(sock.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True
