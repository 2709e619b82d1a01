"""Sentinel failovers under load: real Celery workers with state and broker on a Sentinel-managed Redis (a master,
one replica, three sentinels) and PARLEY_REDIS_WAIT_REPLICAS=1; the master is failed over while conversations run,
then checked like every chaos scenario: every input applied once, in order, every reply sent, none twice beyond
the counted send window. Short in CI; ``PARLEY_CHAOS_SCALE=5`` runs it longer."""

from __future__ import annotations

import threading

import pytest

from tests.chaos.harness import Outcome, run_scenario
from tests.chaos.test_chaos import SCALE, load, report
from tests.e2e.conftest import Cluster

pytestmark = pytest.mark.e2e

SENTINEL = {"sentinel": True, "env": {"PARLEY_REDIS_WAIT_REPLICAS": "1", "PARLEY_REDIS_WAIT_TIMEOUT": "1"}}


@pytest.mark.parametrize("cluster", [SENTINEL], indirect=True)
def test_failovers_in_the_middle_of_a_run(cluster: Cluster) -> None:
    durations: list[float] = []

    def chaos(c: Cluster, stop: threading.Event, out: Outcome) -> None:
        assert c.sentinel is not None
        while len(durations) < 2 * SCALE and not stop.wait(2.0):
            durations.append(c.sentinel.failover())
            out.faults += 1

    out = run_scenario(cluster, load(pace=0.03, inputs_per=int(10 * max(1.0, SCALE))), chaos)
    report("sentinel-failover", out)
    print(f"[chaos] sentinel failovers: {len(durations)}, seconds each {[round(d, 1) for d in durations]}")
    assert out.faults >= 1
    out.assert_safe()
