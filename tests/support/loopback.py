"""A JSON-over-HTTP server on loopback for standing in for providers (LLM APIs, WhatsApp)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

# answer(path, headers, body) -> (status, payload as dict or raw bytes, headers), or None to drop the connection
Answer = Callable[[str, dict[str, str], Any], "tuple[int, Any, dict[str, str]] | None"]
# answer_get(path, headers) -> (status, payload, headers) or None to drop the connection. The payload is a dict
# (JSON), bytes (sent with their Content-Length unless the headers give one: a server that lies), or an iterable
# of byte chunks (sent without a length, until the iterable ends or the client hangs up).
GetAnswer = Callable[[str, dict[str, str]], "tuple[int, Any, dict[str, str]] | None"]


_PEER = threading.local()


def current_peer_port() -> int | None:
    """Inside an ``answer`` callback: the TCP port of the client whose request is being answered (a test maps it
    to the worker process that sent the request)."""
    return getattr(_PEER, "port", None)


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # the default backlog of 5 refuses connections under a burst
    daemon_threads = True


class ServedInThread:
    """An ``http.server`` handler class served on ``host`` and a free port, in a daemon thread: the lifecycle every
    stand-in server here shares (``url``, ``start``, ``stop``)."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1") -> None:
        self.host = host
        self.server = _Server((host, 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.server.server_address[1]}"

    def start(self) -> Self:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class LoopbackServer(ServedInThread):
    """Serves POSTs from ``answer`` on 127.0.0.1 and a free port, in a daemon thread.

    ``bind_host`` (a class attribute) moves every server made afterwards to another local address: the partition
    tests serve the model and WhatsApp stand-ins on the address their network namespaces can reach."""

    bind_host = "127.0.0.1"

    def __init__(self, answer: Answer, answer_get: GetAnswer | None = None) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out as separate writes

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                if len(raw) < length:  # the client died mid-body (a killed worker): nothing was really sent
                    self.close_connection = True
                    return
                _PEER.port = self.client_address[1]
                result = answer(self.path, {k.lower(): v for k, v in self.headers.items()}, json.loads(raw or b"{}"))
                if result is None:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                status, payload, headers = result
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                result = answer_get(self.path, {k.lower(): v for k, v in self.headers.items()}) if answer_get else None
                if result is None:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                status, payload, headers = result
                headers = dict(headers or {})
                self.send_response(status)
                if isinstance(payload, dict):
                    payload = json.dumps(payload).encode()
                    headers.setdefault("Content-Type", "application/json")
                if isinstance(payload, bytes):
                    headers.setdefault("Content-Length", str(len(payload)))
                    self.close_connection = headers["Content-Length"] != str(len(payload))  # a lie spoils the rest
                    chunks: Iterable[bytes] = [payload]
                else:  # no length: the body ends when the connection closes
                    headers["Connection"] = "close"
                    self.close_connection = True
                    chunks = payload
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    for chunk in chunks:
                        self.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):  # the client stopped reading: what we test for
                    self.close_connection = True

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler, self.bind_host)


class LoopbackPeer:
    """A stand-in peer (game engine, model, WhatsApp, trace collector) served in ``self.http``."""

    http: ServedInThread

    @property
    def url(self) -> str:
        return self.http.url

    def start(self) -> Self:
        self.http.start()
        return self

    def stop(self) -> None:
        self.http.stop()
