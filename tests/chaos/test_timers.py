"""Timers under chaos: conversations whose inputs were all sent with ``at=`` come due while workers (and their timer
loops) are SIGKILLed at random moments, beside the usual load; the checker finds none lost, fired twice or
reordered (see harness.py, "Timers")."""

from __future__ import annotations

import random
import signal
import threading
import time

import pytest

from tests.chaos.harness import Outcome, run_scenario
from tests.chaos.test_chaos import SCALE, load, report
from tests.e2e.conftest import Cluster

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("cluster", [{"env": {"PARLEY_TIMER_POLL_SECONDS": "0.1"}}], indirect=True)
def test_timers_come_due_while_workers_are_killed(cluster: Cluster) -> None:
    def chaos(c: Cluster, stop: threading.Event, out: Outcome) -> None:
        while not stop.wait(random.uniform(0.3, 0.8)):
            w = random.choice(c.workers)
            w.kill(signal.SIGKILL)
            out.faults += 1
            time.sleep(0.2)
            w.start()

    out = run_scenario(cluster, load(pace=0.03, timer_conversations=int(10 * SCALE), timer_window=6.0 * SCALE),
                       chaos)
    report("timers under sigkill", out)
    assert out.faults >= 3
    out.assert_safe()
