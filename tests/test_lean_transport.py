"""The lean transport under a turn's own requests (worker.http.lean_transport), against raw loopback servers: one
keep-alive connection reused, a connection the server closed replaced before it is written to, and every failure
raised as the httpx exception httpx's own transport raises for it (the callers classify errors by those), TLS
verified with the pool's context, and the environment's proxies still honoured by the httpx Client above it."""

from __future__ import annotations

import gzip
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from worker.http import pool as httppool
from worker.http.lean_transport import LeanTransport

Handler = Callable[[socket.socket, int], None]  # (the accepted connection, its number from 0)


class RawServer:
    """A loopback TCP server that runs ``handler`` on each accepted connection, in a thread of its own."""

    def __init__(self, handler: Handler, tls: ssl.SSLContext | None = None) -> None:
        self.handler, self.tls = handler, tls
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            n, self.connections = self.connections, self.connections + 1
            if self.tls is not None:
                try:
                    conn = self.tls.wrap_socket(conn, server_side=True)
                except ssl.SSLError:
                    conn.close()
                    continue
            threading.Thread(target=self.handler, args=(conn, n), daemon=True).start()

    def close(self) -> None:
        self.sock.close()


def read_request(conn: socket.socket) -> bytes:
    """One request's head and its Content-Length body ('' when the client hung up)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
    while len(body) < length:
        body += conn.recv(65536)
    return head


def answer(body: bytes = b'{"ok": true}', *, extra: str = "", status: str = "200 OK") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n").encode() + body


def keep_answering(conn: socket.socket, n: int) -> None:
    while read_request(conn):
        conn.sendall(answer(b'{"n": %d}' % n))
    conn.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], RawServer]]:
    servers: list[RawServer] = []

    def start(handler: Handler) -> RawServer:
        servers.append(RawServer(handler))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def client(server: RawServer, timeout: float = 5.0) -> httpx.Client:
    return httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=timeout,
                        transport=LeanTransport(httppool.tls_context))


def test_requests_share_one_kept_alive_connection(serve: Callable[[Handler], RawServer]) -> None:
    server = serve(keep_answering)
    with client(server) as c:
        answers = [c.post("/x", json={"i": i}).json() for i in range(5)]
    assert answers == [{"n": 0}] * 5 and server.connections == 1


def test_a_connection_the_server_closed_is_replaced_before_it_is_written_to(serve: Callable[[Handler], RawServer]) -> None:
    def answer_once(conn: socket.socket, n: int) -> None:
        read_request(conn)
        conn.sendall(answer(b'{"n": %d}' % n))  # kept alive, as far as the client knows, then closed
        conn.close()

    server = serve(answer_once)
    with client(server) as c:
        assert c.post("/x", json={}).json() == {"n": 0}
        threading.Event().wait(0.2)  # the FIN reaches the client
        assert c.post("/x", json={}).json() == {"n": 1}
    assert server.connections == 2


def test_a_connection_close_answer_is_followed(serve: Callable[[Handler], RawServer]) -> None:
    def close_after(conn: socket.socket, n: int) -> None:
        read_request(conn)
        conn.sendall(answer(b'{"n": %d}' % n, extra="Connection: close\r\n"))
        conn.close()

    server = serve(close_after)
    with client(server) as c:
        assert [c.post("/x", json={}).json()["n"] for _ in range(3)] == [0, 1, 2]


def test_what_httpx_sends_and_decodes_is_unchanged(serve: Callable[[Handler], RawServer]) -> None:
    heads: list[bytes] = []

    def gzipped(conn: socket.socket, n: int) -> None:
        heads.append(read_request(conn))
        conn.sendall(answer(gzip.compress(b'{"zipped": true}'), extra="Content-Encoding: gzip\r\n"))
        conn.close()

    server = serve(gzipped)
    with client(server) as c:
        r = c.post("/v1/x?a=1", json={"k": "é"}, headers={"Authorization": "Bearer t"})
    assert r.json() == {"zipped": True} and r.http_version == "HTTP/1.1"
    lines = heads[0].split(b"\r\n")
    assert lines[0] == b"POST /v1/x?a=1 HTTP/1.1"
    names = [line.split(b":")[0].lower() for line in lines[1:]]
    assert names.count(b"host") == 1 and b"authorization" in names and b"content-length" in names


def test_a_server_that_does_not_answer_in_time_is_a_read_timeout(serve: Callable[[Handler], RawServer]) -> None:
    server = serve(lambda conn, n: (read_request(conn), threading.Event().wait(2)))  # type: ignore[func-returns-value]
    with client(server, timeout=0.2) as c, pytest.raises(httpx.ReadTimeout):
        c.post("/x", json={})


def test_a_server_that_hangs_up_without_answering_is_a_protocol_error(serve: Callable[[Handler], RawServer]) -> None:
    server = serve(lambda conn, n: (read_request(conn), conn.close()))  # type: ignore[func-returns-value]
    with client(server) as c, pytest.raises(httpx.RemoteProtocolError):
        c.post("/x", json={})


def test_a_refused_connection_is_a_connect_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens on it
    with httpx.Client(transport=LeanTransport(httppool.tls_context)) as c, pytest.raises(httpx.ConnectError):
        c.post(f"http://127.0.0.1:{port}/x", json={})


def test_a_connect_that_times_out_is_a_connect_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    def slow(*args: object, **kwargs: object) -> socket.socket:
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", slow)
    with httpx.Client(transport=LeanTransport(httppool.tls_context)) as c, pytest.raises(httpx.ConnectTimeout):
        c.post("http://127.0.0.1:9/x", json={})


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("no openssl binary to make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", d / "key.pem", "-out",
                    d / "cert.pem"], check=True, capture_output=True)
    return d / "cert.pem", d / "key.pem"


def test_https_is_verified_with_the_given_context(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    server = RawServer(keep_answering, tls=tls)
    trusting = ssl.create_default_context(cafile=str(cert))
    url = f"https://127.0.0.1:{server.port}/x"
    with httpx.Client(transport=LeanTransport(lambda: trusting)) as c:
        assert c.post(url, json={}).json() == {"n": 0}
    with httpx.Client(transport=LeanTransport(ssl.create_default_context)) as c, pytest.raises(httpx.ConnectError):
        c.post(url, json={})  # a certificate nobody vouches for
    server.close()


def test_turn_clients_still_go_through_the_environments_proxy(serve: Callable[[Handler], RawServer],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    heads: list[bytes] = []

    def proxy(conn: socket.socket, n: int) -> None:
        heads.append(read_request(conn))
        conn.sendall(answer())
        conn.close()

    server = serve(proxy)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with httppool.turn_client(timeout=5.0) as c:
        assert not isinstance(c._transport, LeanTransport)
        assert c.post("http://upstream.invalid/v1/x", json={}).json() == {"ok": True}
    assert heads[0].startswith(b"POST http://upstream.invalid/v1/x HTTP/1.1")


def test_turn_clients_use_the_lean_transport_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(httppool.turn_client()._transport, LeanTransport)
    mock = httpx.MockTransport(lambda r: httpx.Response(200))
    assert httppool.turn_client(transport=mock)._transport is mock
    httppool.use_lean_transport(False)
    try:
        assert isinstance(httppool.turn_client()._transport, httpx.HTTPTransport)
    finally:
        httppool.use_lean_transport(True)
