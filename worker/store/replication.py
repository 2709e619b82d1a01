"""Waiting for replicas: an acknowledged write that survives a failover.

Redis replicates asynchronously: a master that acknowledges a commit and dies before its replica has it loses the
commit when Sentinel promotes the replica, while the player may already hold the reply (and the producer the "accepted"
that made the webhook stop retrying). ``WAIT n timeout`` after the write blocks until ``n`` replicas acknowledged
everything this connection wrote. It must run on the connection that wrote, so the script and the WAIT go in one
pipeline.

A WAIT that times out short of ``n`` cannot undo the write, but the write is not acknowledged either: it raises
:class:`~worker.errors.StoreUnavailableError`, the same unknown outcome as a connection lost after the script was
sent, which every caller already handles (a drain retries and finds the input applied or still waiting; a producer
answers 503 and the webhook's retry deduplicates). That is what makes the guarantee hold in the failover window:
a demoted master accepts writes for a moment before Sentinel reconfigures it, with no replica to acknowledge them
(seen in tests/store/test_sentinel_failover.py), and those writes vanish when it resyncs from the new master. The
price: with one replica and ``n`` = 1, losing the replica stops writes until it returns; run two replicas. Off
(0) by default: a single Redis has no replica to wait for. Not applied on a Cluster client (each master's
replicas would need their own WAIT).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from worker import metrics
from worker.errors import StoreUnavailableError

log = logging.getLogger("parley.store")


@dataclass(frozen=True)
class Replication:
    """``replicas``: how many replicas must acknowledge (0 = do not wait); ``timeout_ms``: how long at most."""

    replicas: int = 0
    timeout_ms: int = 1000

    def call(self, client: Any, script: Any, *, keys: Sequence[Any], args: Sequence[Any], what: str) -> Any:
        """Run a registered script, then (when waiting) WAIT on the same connection; returns the script's reply."""
        if self.replicas <= 0:
            return script(keys=keys, args=args)
        pipe = client.pipeline(transaction=False)
        script(keys=keys, args=args, client=pipe)
        [reply] = self.execute(pipe, what=what)
        return reply

    def execute(self, pipe: Any, *, what: str) -> list[Any]:
        """Run a pipeline of writes, then (when waiting) WAIT once for all of them; returns the writes' replies."""
        if self.replicas > 0:
            pipe.execute_command("WAIT", self.replicas, self.timeout_ms)
        replies = list(pipe.execute())
        if self.replicas > 0:
            self.check(replies.pop(), what)
        return replies

    def check(self, acked: Any, what: str) -> None:
        """``acked``: WAIT's reply after the write ``what``; fewer replicas than asked raises
        :class:`~worker.errors.StoreUnavailableError` (the outcome is unknown)."""
        if int(acked) < self.replicas:
            metrics.REPLICATION_SHORT.labels(what).inc()
            log.warning("write acknowledged by fewer replicas than PARLEY_REDIS_WAIT_REPLICAS: outcome unknown",
                        extra={"what": what, "acked": int(acked), "wanted": self.replicas})
            raise StoreUnavailableError(f"{what} reached {int(acked)} of {self.replicas} replicas within "
                                        f"{self.timeout_ms} ms; it may or may not survive a failover")
