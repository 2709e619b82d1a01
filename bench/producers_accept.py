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
round trip per entry (as before) and with a batch's accepts pipelined. Last, each path at 1 to 32 requests in flight
(``--sweep``) and each at its best: the Python client's rate peaks at a few threads, an HTTP producer's climbs with
what it keeps in flight.

The routed API and the fast path are both up while the lean client sends to one, then the other, with the Python
client measured again before each pair (``--rounds``, default 3): the machine's load drifts less within a round
than between one server's run and the next, so each round's ratios are compared, and their median is printed.

    python bench/producers_accept.py [--url redis://127.0.0.1:6379/15] [--inputs 4000] [--threads 4] [--rounds 3] [--sweep 1,4,8,16,32]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import pathlib
import shlex
import shutil
import socket
import statistics
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
from worker.ingress.app import create_app
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
        self.last_spread = ""  # the lean client's connections over the workers (see spread), at its last run
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

    def spread(self) -> str:
        """The open connections each uvicorn worker holds, e.g. ``4+0``: the workers share one listening socket and
        the kernel gives a keep-alive connection to whichever accepts first, often the same one (a worker on one
        core then serves every request)."""
        supervisor = psutil.Process(self._proc.pid)
        workers = [p for p in supervisor.children() if "spawn_main" in " ".join(p.cmdline())] or [supervisor]
        held = [sum(c.laddr.port == self.port and c.status == "ESTABLISHED" for c in p.net_connections("tcp"))
                for p in workers]
        return "+".join(str(n) for n in sorted(held, reverse=True))

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
    sender = _stdlib_sender(hook.port, threads, run)
    hook.last_spread = hook.spread()
    lean = _threads(n, threads, sender)
    server_us = (hook.cpu_seconds() - cpu) / n * 1e6
    if lean_only:
        return None, lean, None, server_us
    from_go = None
    if go_sender is not None:
        out = subprocess.run([go_sender, hook.base, "bench", str(n), str(threads), run], check=True,
                             capture_output=True, text=True)
        from_go = float(out.stdout)
    return _threads(n, threads, _httpx_sender(hook.base, threads, run)), lean, from_go, server_us


def in_process_us(url: str, prefix: str, n: int, *, fast: bool, in_flight: int = 2) -> float:
    """CPU (µs) one request takes in the app itself, called in-process on uvloop (no uvicorn, no sender) with
    ``in_flight`` requests at a time, as a uvicorn worker here has, against the real Redis: the machine's load moves
    it far less than the webhook process's CPU. ``fast``: with the fast path (else the routes only)."""
    import uvloop

    store = ConversationStore(redis.Redis.from_url(url), prefix=prefix)
    app = create_app(ConversationClient(store, wake=lambda cid: None), store, app_secret="s", verify_token="v",
                     api_tokens="bench", fast_inputs=fast)
    run = uuid.uuid4().hex[:8]

    async def one(i: int) -> None:
        body = json.dumps({"text": f"event {i}", "message_id": f"inproc-{run}-{i}"}).encode()
        path = f"/v1/conversations/p{i % CONVERSATIONS}/events"
        headers = [(b"host", b"127.0.0.1"), (b"authorization", b"Bearer bench"),
                   (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
                 "root_path": "", "headers": headers, "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 80)}
        sent: list[dict[str, object]] = []

        async def receive() -> dict[str, object]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, object]) -> None:
            sent.append(message)

        await app(scope, receive, send)
        assert sent[0]["status"] == 202, sent

    async def requests(first: int, count: int) -> None:
        async def lane(k: int) -> None:
            for i in range(first + k, first + count, in_flight):
                await one(i)

        await asyncio.gather(*(lane(k) for k in range(in_flight)))

    async def measured() -> float:
        await requests(0, 500)  # the connection, the script, the first-use imports
        start = time.process_time()
        await requests(500, n)
        return (time.process_time() - start) / n * 1e6

    return float(uvloop.run(measured()))


def rounds_of_routed_and_fast(url: str, prefix: str, a: argparse.Namespace, workdir: str,
                              go: str | None) -> dict[str, float | None]:
    """The routed API against the fast path, lean client, in ``a.rounds`` rounds (see the module's docstring); the
    medians of each round's figures, and httpx (and Go) once against each."""
    seen: dict[str, list[float]] = {"base": [], "routed": [], "fast": [], "routed_us": [], "fast_us": [],
                                    "routed_app_us": [], "fast_app_us": []}
    with Webhook(url, prefix, a.workers, workdir, ROUTED_APP) as routed, Webhook(url, prefix, a.workers,
                                                                               workdir) as fast:
        for k in range(a.rounds):
            base = python_client(url, prefix, a.inputs, a.threads)
            _, old, _, old_us = http_api(routed, a.inputs, a.threads, None, lean_only=True)
            _, new, _, new_us = http_api(fast, a.inputs, a.threads, None, lean_only=True)
            old_app, new_app = (in_process_us(url, prefix, a.inputs, fast=fast) for fast in (False, True))
            print(f"round {k + 1}: python client {base:.0f}/s; lean client, routed {old:.0f}/s = {old / base:.2f}x "
                  f"({old_us:.0f} µs a request, connections {routed.last_spread}), fast path {new:.0f}/s = "
                  f"{new / base:.2f}x ({new_us:.0f} µs, connections {fast.last_spread}); "
                  f"the app in-process, routed {old_app:.0f} µs, fast path {new_app:.0f} µs")
            for key, value in zip(seen, (base, old / base, new / base, old_us, new_us, old_app, new_app), strict=True):
                seen[key].append(value)
        routed_httpx = http_api(routed, a.inputs, a.threads, None)[0]
        fast_httpx, _, from_go, _ = http_api(fast, a.inputs, a.threads, go)
    out: dict[str, float | None] = {key: statistics.median(values) for key, values in seen.items()}
    return {**out, "routed_httpx": routed_httpx, "fast_httpx": fast_httpx, "go": from_go}


def sweep(url: str, prefix: str, a: argparse.Namespace, workdir: str, go: str | None) -> list[str]:
    """Each path at each concurrency (sender threads, or the Go producer's goroutines), and each at its best.

    Why: the Python client's threads share one interpreter, so its rate peaks at a few threads and then falls; an
    HTTP producer's rate climbs with the requests it keeps in flight (each waits on two hops, not one). Compared at
    one concurrency, the figure says as much about that choice as about the API; best against best does not."""
    counts = [int(k) for k in a.sweep.split(",") if k.strip()]
    rows: list[tuple[int, float, float, float | None]] = []
    with Webhook(url, prefix, a.workers, workdir) as hook:
        for k in counts:
            client = python_client(url, prefix, a.inputs, k)
            lean = _threads(a.inputs, k, _stdlib_sender(hook.port, k, uuid.uuid4().hex[:8]))
            from_go = None
            if go is not None:
                out = subprocess.run([go, hook.base, "bench", str(a.inputs), str(k), uuid.uuid4().hex[:8]],
                                     check=True, capture_output=True, text=True)
                from_go = float(out.stdout)
            rows.append((k, client, lean, from_go))
    out = ["concurrency  python client  HTTP, lean client  HTTP, Go producer  (fast path; inputs/s)"]
    for k, client, lean, from_go in rows:
        go_cell = f"{from_go:8.0f}" if from_go is not None else "       -"
        out.append(f"{k:11d}  {client:13.0f}  {lean:17.0f}  {go_cell:>17s}")
    best = max(r[1] for r in rows)
    line = f"each at its best: python client {best:.0f}/s; HTTP, lean client {max(r[2] for r in rows) / best:.2f}x"
    gos = [r[3] for r in rows if r[3] is not None]
    if gos:
        line += f", a Go producer {max(gos) / best:.2f}x"
    return [*out, line + " (aim 0.5x)"]


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
    p.add_argument("--rounds", type=int, default=3, help="rounds of the routed API against the fast path")
    p.add_argument("--sweep", default="1,4,8,16,32",
                   help="concurrencies at which each path is measured, then compared at its best ('' skips)")
    a = p.parse_args()
    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    try:
        base = python_client(a.url, prefix, a.inputs, a.threads)
        with tempfile.TemporaryDirectory() as workdir:
            go = _go_sender(workdir)
            with Webhook(a.url, prefix, a.workers, workdir, THREADED_APP) as hook:
                old_api, old_lean, _, old_us = http_api(hook, a.inputs, a.threads, None)
            m = rounds_of_routed_and_fast(a.url, prefix, a, workdir, go)
            with Webhook(a.url, prefix, a.workers, workdir, access_log=True) as hook:
                _, logged, _, logged_us = http_api(hook, a.inputs, a.threads, None, lean_only=True)
            line_us = access_log_line_us(workdir)
            swept = sweep(a.url, prefix, a, workdir, go) if a.sweep.strip() else []
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
    _ratio("HTTP API, httpx, accept in a thread", old_api, base)
    _ratio("HTTP API, httpx, accept on the loop, routed", m["routed_httpx"], base)
    _ratio("HTTP API, httpx, fast path", m["fast_httpx"], base, " (aim 0.5x)")
    _ratio("HTTP API, a Go producer, fast path", m["go"], base)
    _ratio("HTTP API, lean client, fast path, access log on", logged, base)
    print(f"median of {a.rounds} rounds, lean client: routed {m['routed']:.2f}x the client, fast path "
          f"{m['fast']:.2f}x (aim 0.5x); webhook CPU a request, routed {m['routed_us']:.0f} µs, fast path "
          f"{m['fast_us']:.0f} µs; the app alone in-process, routed {m['routed_app_us']:.0f} µs, fast path "
          f"{m['fast_app_us']:.0f} µs")
    print(f"webhook CPU per request (lean client): accept in a thread {old_us:.0f} µs, fast path with the access log "
          f"{logged_us:.0f} µs; one access-log line (in-process) {line_us:.0f} µs")
    print(f"python client, 1 thread:  {base_single:8.0f} inputs/s")
    print(f"inlet, 1 consumer, an accept a round trip: {streamed_old:8.0f} inputs/s  = "
          f"{streamed_old / base_single:.2f}x the client on one thread")
    print(f"inlet, 1 consumer, a batch's accepts pipelined: {streamed:8.0f} inputs/s  = "
          f"{streamed / base_single:.2f}x the client on one thread (aim 0.8x)")
    print("\n".join(swept))


if __name__ == "__main__":
    main()
