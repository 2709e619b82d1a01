"""Timers end to end, with real worker processes, a loopback model and WhatsApp: inputs sent with ``at=`` are held in
Redis and fire once, in due order, not before they are due, across a worker's SIGKILL and a Redis restart (append-only
file); a cancelled one never fires."""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.e2e.conftest import Cluster
from tests.support.store_kit import settled
from tests.support.workers import wait_until

pytestmark = pytest.mark.e2e

CID = "447700900606"
FAST = {"appendonly": True, "env": {"PARLEY_TIMER_POLL_SECONDS": "0.1", "PARLEY_BURST_QUIET_SECONDS": "0"}}


@pytest.mark.parametrize("cluster", [FAST], indirect=True)
def test_timers_fire_once_in_order_across_a_sigkill_and_a_redis_restart(cluster: Cluster) -> None:
    w1 = cluster.start_worker("w1")
    cluster.start_worker("w2")
    client = cluster.client()
    client.send_message(CID, "hello", message_id="m0")
    assert wait_until(lambda: cluster.whatsapp.texts_for(CID) == ["ack:hello"], 40), w1.log()

    start = datetime.now(UTC)
    due = [start + timedelta(seconds=6 + i * 0.5) for i in range(6)]
    for i, at in enumerate(due):
        assert client.send_message(CID, f"nudge {i}", message_id=f"nudge-{i}", at=at).scheduled
    client.send_message(CID, "never", message_id="cancelled", at=start + timedelta(seconds=5))
    assert client.send_message(CID, "nudge 0", message_id="nudge-0", at=due[0]).duplicate  # one timer per id
    assert client.cancel_scheduled(CID, "cancelled") is True

    w1.kill(signal.SIGKILL)  # one of the timer loops dies
    cluster.redis.stop()  # SIGTERM: the append-only file keeps the timers
    time.sleep(0.5)
    cluster.redis.start()
    cluster.start_worker("w3")
    assert cluster.whatsapp.texts_for(CID) == ["ack:hello"]  # nothing fired early

    first_seen: dict[str, float] = {}

    def all_answered() -> bool:
        for text in cluster.whatsapp.texts_for(CID):
            first_seen.setdefault(text, time.time())
        return len(first_seen) >= 7

    assert wait_until(all_answered, 60), cluster.workers[-1].log()
    store = cluster.store()
    assert wait_until(lambda: settled(store, CID), 30)
    assert cluster.whatsapp.texts_for(CID) == ["ack:hello", *(f"ack:nudge {i}" for i in range(6))]
    for i, at in enumerate(due):  # never before it was due (the reply comes after the turn it started)
        assert first_seen[f"ack:nudge {i}"] >= at.timestamp(), i
    # on time: within a second of due plus the turn and the send (a generous bound: this is not a benchmark,
    # bench/timers.py measures the lateness)
    assert first_seen["ack:nudge 0"] <= due[0].timestamp() + 10
    assert store.scheduled(CID) == [] and store.timer_conversations() == 0
