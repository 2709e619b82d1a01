"""Large webhook bodies: the limit bites while the body is read, a signed body far beyond Meta's 1000 updates is
refused before it is walked, and verifying and parsing run off the event loop (other requests are served
meanwhile). ``bench/ingress_bodies.py`` measures the latency and the memory."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette

from tests.ingress.test_ingress import SECRET, VERIFY, Rig, sign, text_body
from tests.ingress.test_metrics import Counts
from worker.ingress import app as ingress_app
from worker.ingress.app import create_app


class Served:
    """``app`` under uvicorn in a thread, on a loopback port the system picks."""

    def __init__(self, app: Starlette) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def rig() -> Iterator[Rig]:
    yield Rig()


def test_the_limit_bites_while_the_body_is_still_arriving(rig: Rig) -> None:
    app = create_app(rig.client, rig.store, app_secret=SECRET, verify_token=VERIFY, max_body_bytes=64 * 1024)
    counts = Counts()
    with Served(app) as served, socket.create_connection(("127.0.0.1", served.port), timeout=5) as conn:
        # Chunked, no Content-Length: only counting what arrives can tell. 80 KiB sent, the body never ends.
        conn.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                     b"X-Hub-Signature-256: sha256=00\r\n\r\n")
        for _ in range(10):
            conn.sendall(b"2000\r\n" + b" " * 0x2000 + b"\r\n")
        answer = conn.recv(4096)  # a server reading to the end would wait here for the rest, and time out
    assert answer.startswith(b"HTTP/1.1 413"), answer[:100]
    assert counts.post_delta() == {"too_large": 1}


def test_a_signed_body_far_beyond_metas_batches_is_refused_before_it_is_walked(rig: Rig) -> None:
    counts = Counts()
    raw = b'{"entry": [' + b",".join([b"{}"] * 200_000) + b"]}"
    t = time.perf_counter()
    r = rig.post(raw)
    elapsed = time.perf_counter() - t
    assert r.status_code == 413 and "1000 updates" in r.json()["error"]
    assert counts.post_delta() == {"too_large": 1} and counts.record_delta() == {}
    assert elapsed < 2.0  # walked, the 200,000 empty entries took seconds (and hundreds of MB)


def test_millions_of_objects_anywhere_in_a_body_are_refused_while_decoding(rig: Rig) -> None:
    counts = Counts()
    # Not under "entry": counting updates after decoding would not see them, and decoding them all costs the most.
    raw = b'{"entry": [], "padding": [' + b",".join([b"{}"] * 400_000) + b"]}"
    r = rig.post(raw)
    assert r.status_code == 413 and "JSON objects" in r.json()["error"]
    assert counts.post_delta() == {"too_large": 1}


def test_a_batch_of_metas_size_is_not_refused(rig: Rig) -> None:
    value: dict[str, Any] = {"messages": [], "contacts": []}
    for i in range(1000):  # Meta's most: 1000 updates in one POST
        sender = f"4477009{i:05d}"
        value["messages"].append({"from": sender, "id": f"wamid.N{i}", "timestamp": str(int(time.time())),
                                  "type": "text", "text": {"body": "hi"}})
    raw = httpx.Request("POST", "/", json={"entry": [{"changes": [{"field": "messages", "value": value}]}]}).read()
    r = rig.post(raw)
    assert r.status_code == 200 and r.json()["accepted"] == 1000


def test_verifying_and_parsing_run_off_the_event_loop(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    parsing, release = threading.Event(), threading.Event()
    real_parse = ingress_app.parse_webhook

    def slow_parse(body: Any, **kw: Any) -> Any:
        parsing.set()
        assert release.wait(10), "never released"
        return real_parse(body, **kw)

    monkeypatch.setattr(ingress_app, "parse_webhook", slow_parse)
    app = create_app(rig.client, rig.store, app_secret=SECRET, verify_token=VERIFY)
    raw = text_body()
    with Served(app) as served:
        url = f"http://127.0.0.1:{served.port}"
        answers: list[int] = []
        post = threading.Thread(target=lambda: answers.append(
            httpx.post(f"{url}/webhook", content=raw, headers={"X-Hub-Signature-256": sign(raw)}, timeout=20)
            .status_code))
        post.start()
        try:
            assert parsing.wait(10)
            # The webhook is being parsed: on the event loop, nothing else could be answered until it ends.
            assert httpx.get(f"{url}/healthz", timeout=3).status_code == 200
        finally:
            release.set()
            post.join(20)
    assert answers == [200]


def test_large_bodies_are_handled_two_at_a_time_and_small_ones_are_not_held_up(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    inside: list[int] = []
    most = 0
    lock, release = threading.Lock(), threading.Event()
    real_parse = ingress_app.parse_webhook

    def slow_parse(body: Any, **kw: Any) -> Any:
        nonlocal most
        with lock:
            inside.append(1)
            most = max(most, len(inside))
        try:
            if len(body["entry"]) > 1:  # the large ones wait; the small one goes through
                assert release.wait(20), "never released"
            return real_parse(body, **kw)
        finally:
            with lock:
                inside.pop()

    monkeypatch.setattr(ingress_app, "parse_webhook", slow_parse)
    app = create_app(rig.client, rig.store, app_secret=SECRET, verify_token=VERIFY)
    large = httpx.Request("POST", "/", json={"entry": [{"changes": [], "pad": "x" * ingress_app.LARGE_BODY_BYTES}]
                                             + [{}] * 10}).read()
    with Served(app) as served:
        url = f"http://127.0.0.1:{served.port}"
        codes: list[int] = []

        def post(raw: bytes) -> None:
            codes.append(httpx.post(f"{url}/webhook", content=raw, headers={"X-Hub-Signature-256": sign(raw)},
                                    timeout=30).status_code)

        posts = [threading.Thread(target=post, args=(large,)) for _ in range(4)]
        for t in posts:
            t.start()
        try:
            deadline = time.monotonic() + 10
            while len(inside) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.3)  # room for a third to get in, were it allowed
            assert len(inside) == 2
            post(text_body())  # a small webhook meanwhile: answered at once
            assert codes == [200]
        finally:
            release.set()
            for t in posts:
                t.join(30)
    assert codes == [200] * 5 and most == 3  # two large ones and the small one at most
