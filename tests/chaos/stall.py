"""The SIGSTOP scenario's fault, aimed: stop a worker while it holds a conversation's lease in the middle of a turn.

The stop is made from inside the model stand-in, while it answers a turn's request: at that moment the worker that
sent it is waiting on the answer, so it is mid-turn. Which worker sent it is read from the operating system (the
process that owns the client end of that very TCP connection), which conversation from the request (the harness's
inputs name their conversation first), and that this turn holds the conversation's lease from Redis (the lease key
exists and holds the newest token on the conversation's fence). Only when all three are known is the worker stopped;
otherwise the request is let through and the reason counted, so a run whose stop never landed says why.

While the worker is stopped the fence is watched: another worker taking the conversation over takes a newer token.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import psutil

from tests.e2e.conftest import Cluster
from tests.support.loopback import current_peer_port
from tests.support.store_kit import raw
from tests.support.workers import WorkerProcess


@dataclass
class Stall:
    """One worker stopped while it held ``cid``'s lease mid-turn."""

    cid: str
    worker: str
    pid: int
    token: bytes  # the lease's token (the newest on the fence) when the worker was stopped
    at: float  # time.monotonic() of the stop
    handed_over_after: float | None = None  # seconds from the stop to another worker's newer token, if seen
    fence_at_wake: bytes | None = None
    sweep_view: str = ""  # what the sweeper would see of the conversation, read before the wake-up

    def line(self) -> str:
        over = (f"handed over after {self.handed_over_after:.1f} s" if self.handed_over_after is not None
                else f"not handed over (fence still {self.fence_at_wake!r}; {self.sweep_view})")
        return f"stopped {self.worker} (pid {self.pid}) holding {self.cid}'s lease (token {self.token!r}): {over}"


def conversation_of(body: dict[str, Any]) -> str | None:
    """The conversation a model request is a turn of: the first word of its last user message (the harness's
    inputs read ``<cid> q<n>``); None for a summariser's request (a compaction holds no lease)."""
    messages = body.get("messages") or []
    if any("running summary" in str(m.get("content", "")) for m in messages if m.get("role") == "system"):
        return None
    users = [m for m in messages if m.get("role") == "user" and isinstance(m.get("content"), str)]
    words = users[-1]["content"].split() if users else []
    return words[0] if words else None


def worker_of_port(workers: list[WorkerProcess], port: int, server_port: int) -> WorkerProcess | None:
    """The worker whose process (or a pool child) owns the TCP connection from ``port`` to ``server_port``."""
    for w in workers:
        if w.proc is None or w.proc.poll() is not None:
            continue
        try:
            main = psutil.Process(w.proc.pid)
            for p in (main, *main.children(recursive=True)):
                for conn in p.net_connections(kind="tcp"):
                    if conn.laddr and conn.laddr.port == port and conn.raddr and conn.raddr.port == server_port:
                        return w
        except psutil.Error:
            continue
    return None


class LeaseHolderStopper:
    """Install :meth:`on_request` as the model stand-in's ``on_request``; each :meth:`stop_next` stops the next
    worker found holding a lease mid-turn (see the module docstring) and returns it, or None after ``timeout``."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.store = cluster.store()
        self.redis = raw(self.store)
        self.server_port = int(cluster.llm.base_url.split(":")[-1].split("/")[0])
        self.stalls: list[Stall] = []
        self.seen = 0  # model requests that came while armed
        self.misses: Counter[str] = Counter()  # why a request was let through while armed
        self._armed = False
        self._lock = threading.Lock()
        self._landed = threading.Event()

    def on_request(self, body: dict[str, Any]) -> None:
        with self._lock:
            if not self._armed:
                return
            self.seen += 1
            stall = self._aim(body)
            if stall is None:
                return
            self._armed = False
            self.stalls.append(stall)
            self._landed.set()

    def _aim(self, body: dict[str, Any]) -> Stall | None:
        """Stop the worker asking, if it is mid-turn holding the lease; else count why not."""
        cid = conversation_of(body)
        port = current_peer_port()
        if cid is None:
            self.misses["summariser request (no lease)"] += 1
            return None
        worker = worker_of_port(self.cluster.workers, port, self.server_port) if port is not None else None
        if worker is None or worker.proc is None:
            self.misses["client port not owned by any worker"] += 1
            return None
        keys = self.store.keys(cid)
        lease, fence = self.redis.mget(keys.lease, keys.fence)
        if lease is None or lease != fence:
            self.misses["no lease held" if lease is None else "lease not the newest token"] += 1
            return None
        worker.kill(signal.SIGSTOP)
        return Stall(cid, worker.name, worker.proc.pid, lease, time.monotonic())

    def stop_next(self, timeout: float) -> Stall | None:
        """Arm, and wait up to ``timeout`` for a stop to land. A stop that lands as the wait times out is still
        returned (its worker must be woken: see :meth:`hold`)."""
        with self._lock:
            before = len(self.stalls)
            self._landed.clear()
            self._armed = True
        self._landed.wait(timeout)
        with self._lock:
            self._armed = False
            return self.stalls[before] if len(self.stalls) > before else None

    def hold(self, stall: Stall, seconds: float) -> None:
        """Keep ``stall``'s worker stopped for ``seconds`` from its stop, watching its conversation's fence, then
        wake it."""
        keys = self.store.keys(stall.cid)
        while (left := stall.at + seconds - time.monotonic()) > 0:
            if stall.handed_over_after is None and self.redis.get(keys.fence) != stall.token:
                stall.handed_over_after = time.monotonic() - stall.at
            time.sleep(min(0.1, left))
        stall.fence_at_wake = self.redis.get(keys.fence)
        if stall.handed_over_after is None:
            stall.sweep_view = self._sweep_view(stall.cid)
        worker = next(w for w in self.cluster.workers if w.name == stall.worker)
        worker.kill(signal.SIGCONT)

    def _sweep_view(self, cid: str) -> str:
        """What the sweeper reads of ``cid``: how long since its pending mark, its inbox, lease, hold, attempts."""
        keys = self.store.keys(cid)
        r = self.redis
        score = r.zscore(self.store.global_keys.pending, cid)
        now_ms = self.store._now_ms()
        age = f"{(now_ms - score) / 1000:.1f} s" if score is not None else "none"
        return (f"pending mark age {age}, inbox {r.llen(keys.inbox)}, lease ttl {r.pttl(keys.lease)} ms, "
                f"hold {r.exists(keys.hold)}, attempts {r.hgetall(keys.attempts)}")

    def misses_line(self) -> str:
        why = ", ".join(f"{why}: {n}" for why, n in self.misses.items()) or "none"
        return f"{self.seen} model requests came while armed; let through: {why}"
