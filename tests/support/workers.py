"""Real Celery worker processes for end-to-end and chaos tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class WorkerProcess:
    name: str
    env: dict[str, str]
    pool: str = "threads"
    concurrency: int = 8
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    log_path: str = ""
    wrap: tuple[str, ...] = ()  # a command prefix, e.g. ("ip", "netns", "exec", "host1"): it must exec the worker
    cwd: str = ROOT  # the checkout the worker runs (benchmarks run another revision's tree against this one)
    # A chaos loop and the harness's supervisor may both restart a killed worker: without the lock both started
    # one, and the process the second overwrote ran on as an orphan nobody killed.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def start(self) -> WorkerProcess:
        """Start the worker process; a no-op while the one started last is still running."""
        with self._lock:
            if self.alive():
                return self
            self._spawn()
        return self

    def _spawn(self) -> None:
        if not self.log_path:
            tag = self.env.get("PARLEY_KEY_PREFIX", "")
            self.log_path = os.path.join(tempfile.gettempdir(), f"parley-test-{tag}-{self.name}.log")
        log = open(self.log_path, "ab")  # noqa: SIM115
        cmd = [*self.wrap, sys.executable, "-m", "celery", "-A", "tasks", "worker", "--pool", self.pool,
               "--concurrency", str(self.concurrency), "-Q", "parley", "--loglevel", "INFO",
               "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"{self.name}@%h"]
        self.proc = subprocess.Popen(cmd, env=self.env, cwd=self.cwd, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (the main process and any pool children)."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        if self.proc is None:
            return
        self.kill(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.kill(signal.SIGKILL)
            self.proc.wait(5)
        self.proc = None

    def log(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""


def worker_env(redis_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PARLEY_", "OPENAI_", "ANTHROPIC_", "WHATSAPP_"))}
    env.update({
        "REDIS_URL": redis_url,
        "PARLEY_KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}",
        "PARLEY_SWEEP_INTERVAL": "1",
        "PARLEY_LOG_LEVEL": "INFO",
        # The suites written before bursts count one reply per message; the burst suites turn coalescing on.
        "PARLEY_BURST_QUIET_SECONDS": "0",
        "PYTHONPATH": ROOT,
    })
    env.update(extra)
    return env


def wait_until(predicate, timeout: float, interval: float = 0.05) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
