"""The outbound client pool (worker/http/pool.py) against a real keep-alive HTTP server on loopback."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from worker.http.pool import ClientPool, single_connection
from worker.testing import CreatedClients


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.peers: list[tuple[str, int]] = []  # one entry per request: the client's address (= its connection)
        self.cookies: list[str | None] = []  # one entry per request: the Cookie header it carried
        self.gate = threading.Event()
        self.gate.set()
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    def do_POST(self) -> None:
        server = self.server
        assert isinstance(server, _Server)
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with server.lock:
            server.peers.append(self.client_address)
            server.cookies.append(self.headers.get("Cookie"))
        server.gate.wait(10)
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Set-Cookie", "__cf_bm=abc; Path=/")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    s = _Server()
    threading.Thread(target=s.serve_forever, daemon=True).start()
    yield s
    s.gate.set()
    s.shutdown()
    s.server_close()


def _pool(server: _Server) -> ClientPool:
    url = f"http://127.0.0.1:{server.server_address[1]}"
    return ClientPool(lambda: httpx.Client(base_url=url, limits=single_connection(), timeout=10))


def _post(pool: ClientPool) -> None:
    with pool.lease() as client:
        assert client.post("/x", json={}).json() == {"ok": True}


def test_sequential_requests_reuse_one_warm_connection(server: _Server) -> None:
    pool = _pool(server)
    created = CreatedClients(pool)
    for _ in range(20):
        _post(pool)
    assert created.count == 1
    assert len(set(server.peers)) == 1  # one TCP connection served all twenty: keep-alive, no new handshakes


def test_concurrent_requests_never_share_a_client_and_the_pool_grows_to_the_peak(server: _Server) -> None:
    pool = _pool(server)
    created = CreatedClients(pool)
    server.gate.clear()  # hold every request until all twelve are inside the server at once
    threads = [threading.Thread(target=_post, args=(pool,)) for _ in range(12)]
    for t in threads:
        t.start()
    for _ in range(200):
        if len(server.peers) == 12:
            break
        threading.Event().wait(0.05)
    assert len(server.peers) == 12 and len(set(server.peers)) == 12  # twelve connections, none queued
    server.gate.set()
    for t in threads:
        t.join(10)
    assert created.count == 12 and pool.idle() == 12
    # Quiet again: the most recently returned client serves, on its open connection.
    before = set(server.peers)
    for _ in range(5):
        _post(pool)
    assert created.count == 12 and len(set(server.peers[12:])) == 1 and server.peers[12] in before


def test_each_client_holds_at_most_one_connection(server: _Server) -> None:
    pool = _pool(server)
    _post(pool)
    with pool.lease() as client:
        pool_obj = client._transport._pool  # type: ignore[attr-defined]
        assert len(pool_obj.connections) == 1


def test_surplus_idle_clients_are_closed(server: _Server) -> None:
    url = f"http://127.0.0.1:{server.server_address[1]}"
    pool = ClientPool(lambda: httpx.Client(base_url=url, limits=single_connection()), max_idle=2)
    leased = [pool._take() for _ in range(4)]
    for c in leased:
        pool._give_back(c)
    assert pool.idle() == 2
    assert [c.is_closed for c in leased] == [False, False, True, True]


def test_a_forked_child_starts_with_an_empty_pool(server: _Server) -> None:
    pool = _pool(server)
    created = CreatedClients(pool)
    _post(pool)
    assert pool.idle() == 1
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first lease makes a new client, never the parent's socket
        try:
            _post(pool)
            os.write(w, f"{created.count}".encode())
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    assert os.read(r, 16) == b"1"
    assert len(set(server.peers)) == 2


def test_clients_idle_past_the_keep_alive_are_closed(server: _Server) -> None:
    """After a burst the pool shrinks back to what traffic needs (it grew to the burst's peak)."""
    url = f"http://127.0.0.1:{server.server_address[1]}"
    now = [0.0]
    pool = ClientPool(lambda: httpx.Client(base_url=url, limits=single_connection()), idle_seconds=5.0,
                      clock=lambda: now[0])
    burst = [pool._take() for _ in range(10)]
    for c in burst:
        pool._give_back(c)
    assert pool.idle() == 10
    now[0] = 6.0  # a quiet spell longer than the keep-alive; then one request
    with pool.lease():
        pass
    assert pool.idle() == 1  # the request's client (the most recent) stayed; the nine shells were closed
    assert sum(c.is_closed for c in burst) == 9


@pytest.mark.parametrize("lean", [True, False])
def test_a_turn_clients_answer_is_freed_without_the_cycle_collector(server: _Server, lean: bool) -> None:
    """httpx binds a response and its body stream to each other: three requests a turn left ~100 objects to the
    cyclic collector, whose passes were a large part of a busy worker's CPU (bench/README.md)."""
    import gc
    import weakref

    from worker.http.pool import turn_client, use_lean_transport

    use_lean_transport(lean)
    client = turn_client(base_url=f"http://127.0.0.1:{server.server_address[1]}", timeout=10)
    gc.disable()
    try:
        response = client.post("/x", json={})
        assert response.json() == {"ok": True} and response.read() == b'{"ok": true}'
        assert list(response.iter_bytes()) == [b'{"ok": true}']  # the body can still be read as a stream
        gone = weakref.ref(response)
        del response
        assert gone() is None  # freed by its reference count alone
    finally:
        gc.enable()
        client.close()
        use_lean_transport(True)


@pytest.mark.parametrize("lean", [True, False])
def test_a_turn_client_sends_back_no_cookie_an_answer_set(server: _Server, lean: bool) -> None:
    """A cookie would come back only on the requests that lease the same pooled client; reading every answer's
    cookies cost about 3% of a busy worker's CPU (bench/README.md)."""
    from worker.http.pool import turn_client, use_lean_transport

    use_lean_transport(lean)
    client = turn_client(base_url=f"http://127.0.0.1:{server.server_address[1]}", timeout=10)
    try:
        first = client.post("/x", json={})
        assert first.headers["set-cookie"].startswith("__cf_bm=")  # the answer still shows it
        client.post("/x", json={})
        client.cookies = {"a": "b"}  # type: ignore[assignment]  # ignored too
        client.post("/x", json={})
        assert server.cookies == [None, None, None] and not client.cookies
    finally:
        client.close()
        use_lean_transport(True)
