"""Takeover at the default settings: a worker SIGKILLed in the middle of a slow turn strands its conversation
for about a lease and a sweep, not minutes; while it was alive, its heartbeat kept the conversation its own."""

from __future__ import annotations

import re
import signal
import time

import pytest

from tests.e2e.conftest import Cluster
from tests.support.fake_openai import hold_first_request
from tests.support.store_kit import settled
from tests.support.workers import wait_until
from worker.settings import Settings

pytestmark = pytest.mark.e2e

CID = "447700900666"
TAKEOVER_LIMIT = 30.0  # seconds from the kill to the answer: lease + sweep interval + one 3 s model call + slack
EMPTY_SWEEP = re.compile(r"Task parley\.sweep\[[^\]]+\] succeeded in [0-9.e-]+s: 0\b")


def empty_sweeps(cluster: Cluster) -> int:
    """Sweeps finished so far (Celery's log line of each task) that found no conversation to wake."""
    return sum(len(EMPTY_SWEEP.findall(w.log())) for w in cluster.workers)


@pytest.mark.parametrize("pool", ["threads", "gevent", "prefork"])
def test_a_killed_workers_conversation_is_taken_over_at_the_default_settings(cluster: Cluster, pool: str) -> None:
    for name in ("PARLEY_LEASE_SECONDS", "PARLEY_SWEEP_INTERVAL", "PARLEY_LLM_TIMEOUT"):
        cluster.env.pop(name)  # the shipped defaults, not the suite's short lease
    defaults = Settings()
    assert defaults.drain.lease_seconds <= 10 and defaults.drain.sweep_interval <= 5
    first_call, killed = hold_first_request(cluster.llm)  # the busy worker's turn is in flight until it dies
    cluster.llm.delay = 3.0
    busy = cluster.start_worker("busy", pool=pool, concurrency=2)
    client = cluster.client()
    client.send_message(CID, "are you there?", message_id="m1")
    client.send_message(CID, "and now?", message_id="m2")
    assert wait_until(first_call.is_set, 60), busy.log()
    started = time.monotonic()
    spare = cluster.start_worker("spare", pool=pool, concurrency=2)
    assert wait_until(lambda: "ready" in spare.log(), 60), spare.log()
    # Past the lease, with a spare worker sweeping: the heartbeat keeps the slow turn's conversation its own.
    time.sleep(max(0.0, started + 1.5 * defaults.drain.lease_seconds - time.monotonic()))
    # Two more sweeps (one per interval across the workers) have looked since and woken nothing: the lease, which
    # would have run out without the heartbeat, was still held when they looked.
    swept = empty_sweeps(cluster)
    assert wait_until(lambda: empty_sweeps(cluster) >= swept + 2, 3 * defaults.drain.sweep_interval + 30), spare.log()
    assert len(cluster.llm.requests) == 1, "another worker took over a live worker's turn"
    busy.kill(signal.SIGKILL)
    killed_at = time.monotonic()
    killed.set()
    assert wait_until(lambda: len(cluster.whatsapp.texts_for(CID)) >= 1, TAKEOVER_LIMIT), spare.log()
    took = time.monotonic() - killed_at
    assert took <= TAKEOVER_LIMIT, took
    assert wait_until(lambda: len(cluster.whatsapp.texts_for(CID)) >= 2, 20), spare.log()
    store = cluster.store()
    assert wait_until(lambda: settled(store, CID), 30), spare.log()  # no reply can come after this
    assert cluster.whatsapp.texts_for(CID) == ["ack:are you there?", "ack:and now?"]
    print(f"{pool}: answered {took:.1f} s after the SIGKILL")
