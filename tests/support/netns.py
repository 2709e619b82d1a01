"""Several hosts on one machine: network namespaces the test makes itself, joined by a bridge.

Layout (``10.<a>.<b>.0/24``, picked at random per network so parallel runs do not meet):

- ``infra`` namespace: the bridge, at ``.1``; Redis (state and broker) runs here.
- host namespaces ``h0``..``h<n-1>``: one veth each into the bridge, at ``.10+i``; Celery workers run here.
- the test's own (root) namespace: a veth into the bridge at ``.2``; the producer, the checker and the loopback
  model and WhatsApp stand-ins live here.

``cut(i)`` takes host i's port on the bridge down: its packets are dropped both ways, its TCP connections hang
(no reset), as when a switch port or a link dies. ``restore(i)`` brings it back. Stalling a host is the tests'
business (SIGSTOP its workers). Needs root and iproute2; :func:`make_network` skips (or fails under CI) when
namespaces cannot be made. ``close()`` deletes everything, also after a failed setup.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field

from tests.support.redis_server import skip_or_fail


def _ip(*args: str, ns: str | None = None) -> None:
    cmd = ["ip", *(["netns", "exec", ns, "ip"] if ns else []), *args]
    subprocess.run(cmd, check=True, capture_output=True, timeout=30)


@dataclass
class Network:
    hosts: int = 3
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:5])
    subnet: str = field(default_factory=lambda: f"10.{random.randint(100, 250)}.{random.randint(0, 250)}")
    made: list[str] = field(default_factory=list)  # namespaces made, deleted by close()
    root_links: list[str] = field(default_factory=list)

    @property
    def infra(self) -> str:
        return f"pinf{self.tag}"

    def host(self, i: int) -> str:
        return f"ph{i}{self.tag}"

    @property
    def infra_ip(self) -> str:
        return f"{self.subnet}.1"

    @property
    def root_ip(self) -> str:
        return f"{self.subnet}.2"

    def host_ip(self, i: int) -> str:
        return f"{self.subnet}.{10 + i}"

    def _port(self, name: str) -> str:
        """The bridge-side end of a veth (interface names stop at 15 characters)."""
        return f"b{name[:2]}{self.tag}"[:15]

    def create(self) -> Network:
        _ip("netns", "add", self.infra)
        self.made.append(self.infra)
        _ip("link", "set", "lo", "up", ns=self.infra)
        _ip("link", "add", "br0", "type", "bridge", ns=self.infra)
        _ip("addr", "add", f"{self.infra_ip}/24", "dev", "br0", ns=self.infra)
        _ip("link", "set", "br0", "up", ns=self.infra)
        self._attach(None, "r", self.root_ip)
        for i in range(self.hosts):
            ns = self.host(i)
            _ip("netns", "add", ns)
            self.made.append(ns)
            _ip("link", "set", "lo", "up", ns=ns)
            self._attach(ns, f"h{i}", self.host_ip(i))
        return self

    def _attach(self, ns: str | None, short: str, address: str) -> None:
        """A veth pair: one end (``eth0`` in ``ns``, or ``v<short><tag>`` in the root namespace) at ``address``,
        the other in the infra namespace's bridge."""
        inside, port = (f"v{short}{self.tag}", f"b{short}{self.tag}")
        _ip("link", "add", inside, "type", "veth", "peer", "name", port)
        if ns is None:
            self.root_links.append(inside)
        _ip("link", "set", port, "netns", self.infra)
        _ip("link", "set", port, "master", "br0", ns=self.infra)
        _ip("link", "set", port, "up", ns=self.infra)
        if ns is not None:
            _ip("link", "set", inside, "netns", ns)
            _ip("link", "set", inside, "name", "eth0", ns=ns)
            inside = "eth0"
        _ip("addr", "add", f"{address}/24", "dev", inside, ns=ns)
        _ip("link", "set", inside, "up", ns=ns)

    def cut(self, i: int) -> None:
        """Drop every packet to and from host i (its bridge port goes down)."""
        _ip("link", "set", f"bh{i}{self.tag}", "down", ns=self.infra)

    def restore(self, i: int) -> None:
        _ip("link", "set", f"bh{i}{self.tag}", "up", ns=self.infra)

    def wrap(self, ns: str) -> tuple[str, ...]:
        """The command prefix that runs a program inside ``ns``."""
        return ("ip", "netns", "exec", ns)

    def close(self) -> None:
        for link in self.root_links:
            subprocess.run(["ip", "link", "del", link], capture_output=True, timeout=30)
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        self.made.clear()


def make_network(hosts: int = 3) -> Network:
    """A new network of ``hosts`` hosts and an infra namespace; skipped (failed in CI) where it cannot be made."""
    if shutil.which("ip") is None:
        skip_or_fail("iproute2 (ip) is not installed: network namespaces unavailable")
    net = Network(hosts=hosts)
    try:
        return net.create()
    except subprocess.CalledProcessError as exc:
        net.close()
        skip_or_fail(f"cannot make network namespaces (root needed): {exc.stderr.decode(errors='replace')[-300:]}")
    raise AssertionError("unreachable")
