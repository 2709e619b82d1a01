"""Chaos with bursts: coalescing on, players sending bursts, workers SIGKILLed while bursts wait for their quiet
period and while burst turns run. Checked by the harness (see harness.py): every input applied once in a
committed turn (a burst turn's trace entry lists its inputs), in order, nothing stranded, every turn's reply
delivered, in order, duplicated at most within the counted send window.

The short version runs in CI; ``PARLEY_CHAOS_SCALE=5`` scales it up.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from typing import Any

import pytest

from tests.chaos.harness import Load, Outcome, run_scenario
from tests.chaos.test_chaos import report
from tests.e2e.conftest import Cluster
from tests.support.bursts import introduced, is_summary
from tests.support.store_kit import raw

pytestmark = pytest.mark.e2e

SCALE = float(os.environ.get("PARLEY_CHAOS_SCALE", "1"))
QUIET = 0.5
BURSTS = {"env": {"PARLEY_BURST_QUIET_SECONDS": str(QUIET), "PARLEY_BURST_MAX_WAIT_SECONDS": "3"}}


@pytest.mark.parametrize("cluster", [BURSTS], indirect=True)
def test_sigkill_while_bursts_wait_and_while_burst_turns_run(cluster: Cluster) -> None:
    cluster.llm.delay = 0.15  # turns take a moment, so that kills land inside them
    turn_kills = [0]
    limit = max(1, int(SCALE))

    def on_request(body: dict[str, Any]) -> None:
        # A burst turn is asking the model: kill every worker (whichever runs it dies mid-turn, after the burst
        # was recorded); the harness's supervisor starts them again.
        if is_summary(body) or len(introduced(body)) < 2 or turn_kills[0] >= limit:
            return
        turn_kills[0] += 1
        for w in cluster.workers:
            w.kill(signal.SIGKILL)

    cluster.llm.on_request = on_request
    waiting_kills = [0]

    def chaos(c: Cluster, stop: threading.Event, out: Outcome) -> None:
        store = c.store()
        cids = [f"4477{i:08d}" for i in range(load.conversations)]
        while not stop.wait(random.uniform(0.8, 1.5)):
            # Kill a worker while some burst waits for its quiet period (its wake-up may be in that worker).
            deadline = time.monotonic() + 5.0
            held = 0
            while not stop.is_set() and time.monotonic() < deadline and not held:
                try:
                    held = sum(raw(store).exists(store.keys(cid).hold) for cid in cids)
                except Exception:  # a worker's death does not touch Redis, but be safe
                    held = 0
                time.sleep(0.02)
            w = random.choice(c.workers)
            if held and w.alive():
                w.kill(signal.SIGKILL)
                out.faults += 1
                waiting_kills[0] += 1

    load = Load(conversations=int(8 * SCALE), inputs_per=int(10 * max(1.0, SCALE / 2)), event_every=3, pace=0.05,
                burst_max=4, burst_gap=0.05, ready_first=True)
    out = run_scenario(cluster, load, chaos)
    out.faults += turn_kills[0]
    report("bursts-sigkill", out)
    print(f"[chaos] bursts-sigkill: kills while a burst waited={waiting_kills[0]}, "
          f"kills during burst turns={turn_kills[0]}")
    out.assert_safe()
    assert out.burst_turns >= 3, out.line()  # bursts were coalesced
    assert turn_kills[0] >= 1 and waiting_kills[0] >= 1, (turn_kills, waiting_kills)
