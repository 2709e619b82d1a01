"""Timers under chaos: conversations whose inputs were all sent with ``at=`` come due while workers (and their timer
loops) are SIGKILLed at random moments, beside the usual load; the checker finds none lost, fired twice or
reordered (see harness.py, "Timers")."""

from __future__ import annotations

import pytest

from tests.chaos.harness import run_scenario, sigkill_at_random
from tests.chaos.test_chaos import SCALE, load, report
from tests.e2e.conftest import Cluster

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("cluster", [{"env": {"PARLEY_TIMER_POLL_SECONDS": "0.1"}}], indirect=True)
def test_timers_come_due_while_workers_are_killed(cluster: Cluster) -> None:
    out = run_scenario(cluster, load(pace=0.03, timer_conversations=int(10 * SCALE), timer_window=6.0 * SCALE),
                       sigkill_at_random)
    report("timers under sigkill", out)
    assert out.faults >= 3
    out.assert_safe()
