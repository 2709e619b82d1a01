"""The webhook process as the Procfile runs it (uvicorn, configured from the environment) with the producers' API
on, on a free loopback port, against a Redis of the test's own."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx

from tests.support.redis_server import free_port


class ApiProcess:
    def __init__(self, redis_url: str, tokens: str, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "REDIS_URL": redis_url, "PARLEY_API_TOKENS": tokens, "PARLEY_LOG_LEVEL": "WARNING",
                    **env}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ApiProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "worker.ingress.app:app", "--host", "127.0.0.1", "--port",
             str(self.port), "--log-level", "warning"], env=self.env)
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the webhook process did not come up")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            self.proc = None
