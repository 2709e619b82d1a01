"""Accepted inputs per second through the producers' HTTP API and through the stream inlet, each against the Python
client's accept rate in the same run (issue 29's aims: at least 0.5x through HTTP, at least 0.8x through the inlet).

All three accept the same inputs (game events, unique message ids, spread over conversations) into the same Redis
(the URL given; a scratch prefix, deleted afterwards). The Python client and the HTTP API are driven by the same
number of threads; the API is the webhook process as the Procfile runs it (uvicorn, two workers, configured from the
environment), sent to by httpx and by a lean client (http.client): on a small machine the sender's own CPU is
part of what is measured, and httpx's is about as much as the server's; with Go on the PATH, also by a producer
written in Go (bench/go_sender, as a game engine's backend might be). Old against new in the same run: the API
with every accept in a worker thread (bench/threaded_api.py, as before issue 29's async accept), with the accept
on the event loop answered by the Starlette routes (bench/routed_api.py, as before the fast path for messages and
events) and through the fast path (worker/ingress/fast_inputs.py, the app as it is); uvicorn with its access log
(the Procfile turns it off) and without. The inlet is one
in-process consumer draining a stream filled beforehand (publishing is the engine's cost, not Parley's), with one
round trip per entry (as before) and with a batch's accepts pipelined.

    python bench/producers_accept.py [--url redis://127.0.0.1:6379/15] [--inputs 4000] [--threads 4]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import pathlib
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable

import httpx
import psutil
import redis

from worker.client import ConversationClient
from worker.inlet.stream import Inlet
from worker.store.redis_store import ConversationStore

CONVERSATIONS = 200
NEW_APP = "worker.ingress.app:app"
#: The API as it was before the async accept (every input in a worker thread): the old side of old against new.
THREADED_APP = "bench.threaded_api:app"
#: The API with the accept on the loop but every request through Starlette's router: the old side of the fast path.
ROUTED_APP = "bench.routed_api:app"
ROOT = pathlib.Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _threads(n: int, threads: int, send: Callable[[int], None]) -> float:
    """Inputs per second when ``threads`` threads send inputs 0..n-1 between them."""
    def run(k: int) -> None:
        for i in range(k, n, threads):
            send(i)

    workers = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return n / (time.perf_counter() - start)


def python_client(url: str, prefix: str, n: int, threads: int) -> float:
    client = ConversationClient(ConversationStore(redis.Redis.from_url(url), prefix=prefix), wake=lambda cid: None)
    run = uuid.uuid4().hex[:8]
    return _threads(n, threads, lambda i: client.send_event(f"c{i % CONVERSATIONS}", f"event {i}",
                                                           message_id=f"py-{run}-{i}"))


def webhook_command(port: int, workers: int, app: str = NEW_APP) -> list[str]:
    """The Procfile's webhook command (uvicorn and its options), on ``port`` with ``workers`` workers, serving
    ``app``."""
    line = next(ln for ln in (ROOT / "Procfile").read_text().splitlines() if ln.startswith("webhook:"))
    command = line.partition(":")[2].replace("${PORT:-8080}", str(port)).replace(NEW_APP, app)
    return shlex.split(command.replace("${PARLEY_WEBHOOK_WORKERS:-2}", str(workers)).replace("0.0.0.0", "127.0.0.1"))


def _stdlib_sender(port: int, threads: int, run: str) -> Callable[[int], None]:
    """A lean HTTP client (http.client, one keep-alive connection a thread, Nagle off as Go's net/http has it): the
    server's share of the cost shows where httpx's own (about half a millisecond of CPU a request here) would hide
    it."""
    conns = [http.client.HTTPConnection("127.0.0.1", port) for _ in range(threads)]
    for conn in conns:
        conn.connect()
        assert conn.sock is not None
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    headers = {"Authorization": "Bearer bench", "Content-Type": "application/json"}

    def send(i: int) -> None:
        conn = conns[i % threads]
        conn.request("POST", f"/v1/conversations/l{i % CONVERSATIONS}/events", headers=headers,
                     body=json.dumps({"text": f"event {i}", "message_id": f"lean-{run}-{i}"}))
        r = conn.getresponse()
        assert r.status == 202, r.read()
        r.read()

    return send


def _go_sender(workdir: str) -> str | None:
    """bench/go_sender built into ``workdir`` (a producer in Go, the standard library only), or ``None`` without Go."""
    go = shutil.which("go")
    if go is None:
        return None
    binary = os.path.join(workdir, "go_sender")
    subprocess.run([go, "build", "-o", binary, "."], cwd=ROOT / "bench" / "go_sender", check=True,
                   env={**os.environ, "CGO_ENABLED": "0"})
    return binary


class Webhook:
    """The webhook process as the Procfile runs it (``app``; its log, at the Procfile's level, goes to a file), on a
    free port, while in the block. ``access_log``: without the Procfile's ``--no-access-log`` (a line per request)."""

    def __init__(self, url: str, prefix: str, workers: int, workdir: str, app: str = NEW_APP,
                 access_log: bool = False) -> None:
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "REDIS_URL": url, "PARLEY_KEY_PREFIX": prefix, "PARLEY_API_TOKENS": "bench",
               "PARLEY_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)}
        self._log = open(os.path.join(workdir, f"uvicorn-{self.port}.log"), "wb")  # noqa: SIM115
        command = webhook_command(self.port, workers, app)
        if access_log:
            command.remove("--no-access-log")
        self._proc = subprocess.Popen([sys.executable, "-m", *command], env=env, stdout=self._log, stderr=self._log)

    def __enter__(self) -> Webhook:
        for _ in range(300):
            try:
                if httpx.get(f"{self.base}/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        return self

    def cpu_seconds(self) -> float:
        """CPU (user and system) the webhook's processes have used so far: the supervisor and its workers."""
        proc = psutil.Process(self._proc.pid)
        return sum(sum(p.cpu_times()[:2]) for p in [proc, *proc.children(recursive=True)])

    def __exit__(self, *exc: object) -> None:
        self._proc.terminate()
        self._proc.wait(10)
        self._log.close()


def _httpx_sender(base: str, threads: int, run: str) -> Callable[[int], None]:
    clients = [httpx.Client(base_url=base, headers={"Authorization": "Bearer bench"}) for _ in range(threads)]

    def send(i: int) -> None:
        r = clients[i % threads].post(f"/v1/conversations/h{i % CONVERSATIONS}/events",
                                      json={"text": f"event {i}", "message_id": f"http-{run}-{i}"})
        assert r.status_code == 202, r.text

    return send


def http_api(hook: Webhook, n: int, threads: int, go_sender: str | None, *,
             lean_only: bool = False) -> tuple[float | None, float, float | None, float]:
    """Inputs per second through the webhook process, sent with httpx, with a lean client and from Go (the lean
    client only, when ``lean_only``); and the server's CPU per request (µs) while the lean client sent (less moved
    by the machine's other load than a rate)."""
    run = uuid.uuid4().hex[:8]
    cpu = hook.cpu_seconds()
    lean = _threads(n, threads, _stdlib_sender(hook.port, threads, run))
    server_us = (hook.cpu_seconds() - cpu) / n * 1e6
    if lean_only:
        return None, lean, None, server_us
    from_go = None
    if go_sender is not None:
        out = subprocess.run([go_sender, hook.base, "bench", str(n), str(threads), run], check=True,
                             capture_output=True, text=True)
        from_go = float(out.stdout)
    return _threads(n, threads, _httpx_sender(hook.base, threads, run)), lean, from_go, server_us


def inlet(url: str, prefix: str, n: int, *, one_by_one: bool = False) -> float:
    """Inputs per second through one in-process inlet draining a stream filled beforehand. ``one_by_one``: each
    entry accepted in a round trip of its own, as before issue 29's batched accepts (the old side)."""
    r = redis.Redis.from_url(url)
    stream = f"{prefix}:inlet{'-old' if one_by_one else ''}"
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(stream, {"envelope": json.dumps({"kind": "event", "conversation_id": f"s{i % CONVERSATIONS}",
                                                    "text": f"event {i}"})})
    pipe.execute()
    store = ConversationStore(r, prefix=prefix)
    if one_by_one:
        store.accept_many = lambda inputs: [store._accept_or_full(*one) for one in inputs]  # type: ignore[method-assign]
    consumer = Inlet(r, ConversationClient(store, wake=lambda cid: None), stream, "bench", "one", block_ms=1)
    consumer.ensure_group()
    start = time.perf_counter()
    done = 0
    while done < n:
        done += consumer.step()
    return n / (time.perf_counter() - start)


def access_log_line_us(workdir: str, n: int = 20_000) -> float:
    """CPU (µs) of one uvicorn access-log line as uvicorn configures it, written to a line-buffered file (what a
    process manager reading stdout costs at least): in-process, so the machine's other load moves it little."""
    import logging.config

    from uvicorn.config import LOGGING_CONFIG

    logging.config.dictConfig(LOGGING_CONFIG)
    log = logging.getLogger("uvicorn.access")
    with open(os.path.join(workdir, "access.log"), "w", buffering=1) as out:
        for handler in log.handlers:
            handler.setStream(out)  # type: ignore[attr-defined]
        start = time.process_time()
        for _ in range(n):
            log.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:50000", "POST", "/v1/conversations/c1/events", "1.1", 202)
        return (time.process_time() - start) / n * 1e6


def _ratio(name: str, rate: float | None, base: float, aim: str = "") -> None:
    if rate is not None:
        print(f"{name:58s} {rate:8.0f} inputs/s  = {rate / base:.2f}x the client{aim}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="redis://127.0.0.1:6379/15")
    p.add_argument("--inputs", type=int, default=4000)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--workers", type=int, default=2, help="uvicorn workers (the Procfile's default)")
    a = p.parse_args()
    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    try:
        base = python_client(a.url, prefix, a.inputs, a.threads)
        with tempfile.TemporaryDirectory() as workdir:
            go = _go_sender(workdir)
            with Webhook(a.url, prefix, a.workers, workdir, THREADED_APP) as hook:
                old_api, old_lean, _, old_us = http_api(hook, a.inputs, a.threads, None)
            with Webhook(a.url, prefix, a.workers, workdir, ROUTED_APP) as hook:
                routed_api, routed_lean, _, routed_us = http_api(hook, a.inputs, a.threads, None)
            with Webhook(a.url, prefix, a.workers, workdir) as hook:
                api, lean, from_go, new_us = http_api(hook, a.inputs, a.threads, go)
            with Webhook(a.url, prefix, a.workers, workdir, access_log=True) as hook:
                _, logged, _, logged_us = http_api(hook, a.inputs, a.threads, None, lean_only=True)
            line_us = access_log_line_us(workdir)
        base_single = python_client(a.url, prefix, a.inputs, 1)
        streamed_old = inlet(a.url, prefix, a.inputs, one_by_one=True)
        streamed = inlet(a.url, prefix, a.inputs)
    finally:
        r = redis.Redis.from_url(a.url)
        for key in r.scan_iter(match=f"{prefix}*", count=1000):
            r.delete(key)
    print(f"python client, {a.threads} threads: {base:8.0f} inputs/s")
    print(f"HTTP API: {a.threads} sender threads, {a.workers} uvicorn workers")
    _ratio("HTTP API, lean client (http.client), accept in a thread", old_lean, base)
    _ratio("HTTP API, lean client (http.client), accept on the loop, routed", routed_lean, base)
    _ratio("HTTP API, lean client (http.client), fast path", lean, base, " (aim 0.5x)")
    _ratio("HTTP API, httpx, accept in a thread", old_api, base)
    _ratio("HTTP API, httpx, accept on the loop, routed", routed_api, base)
    _ratio("HTTP API, httpx, fast path", api, base, " (aim 0.5x)")
    _ratio("HTTP API, a Go producer, fast path", from_go, base)
    _ratio("HTTP API, lean client, fast path, access log on", logged, base)
    print(f"webhook CPU per request (lean client): accept in a thread {old_us:.0f} µs, on the loop and routed "
          f"{routed_us:.0f} µs, fast path {new_us:.0f} µs, fast path with the access log {logged_us:.0f} µs; "
          f"one access-log line (in-process) {line_us:.0f} µs")
    print(f"python client, 1 thread:  {base_single:8.0f} inputs/s")
    print(f"inlet, 1 consumer, an accept a round trip: {streamed_old:8.0f} inputs/s  = "
          f"{streamed_old / base_single:.2f}x the client on one thread")
    print(f"inlet, 1 consumer, a batch's accepts pipelined: {streamed:8.0f} inputs/s  = "
          f"{streamed / base_single:.2f}x the client on one thread (aim 0.8x)")


if __name__ == "__main__":
    main()
