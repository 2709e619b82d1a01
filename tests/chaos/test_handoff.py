"""Chaos with a person taking over: half the conversations are paused for the middle half of the run, a person's
message follows each of their inputs meanwhile, then they are resumed, while workers are SIGKILLed at random
moments (mid-turn too: the model takes a moment). Checked by the harness (see harness.py): every input and every
operator's message applied once, in order, in the state; every reply and every operator's message delivered, in
order, duplicated only within the counted send window; and no input left without a reply but those a pause
withheld (the never-silent rule's one exception).

The short version runs in CI; ``PARLEY_CHAOS_SCALE=5`` scales it up.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import pytest

from tests.chaos.harness import Load, Outcome, run_scenario
from tests.chaos.test_chaos import report
from tests.e2e.conftest import Cluster

pytestmark = pytest.mark.e2e

SCALE = float(os.environ.get("PARLEY_CHAOS_SCALE", "1"))


def test_sigkill_while_people_take_conversations_over(cluster: Cluster) -> None:
    cluster.llm.delay = 0.05  # turns take a moment, so that kills land inside them

    def chaos(c: Cluster, stop: threading.Event, out: Outcome) -> None:
        # Not as often as the plain SIGKILL scenario: the producer waits for each paused conversation to drain
        # before its resume (so that the pause withholds inputs), and a worker needs a moment to start again.
        while not stop.wait(random.uniform(1.0, 2.0)):
            w = random.choice(c.workers)
            w.kill(signal.SIGKILL)
            out.landed("sigkill")
            time.sleep(0.2)
            w.start()

    load = Load(conversations=int(12 * SCALE), inputs_per=int(12 * max(1.0, SCALE / 2)), event_every=4, pace=0.03,
                handoff_every=2, ready_first=True)
    out = run_scenario(cluster, load, chaos)
    report("handoff-sigkill", out)
    out.assert_safe()
    assert out.faults >= 3, out.line()
    assert out.withheld >= load.conversations // 2, out.line()  # the pauses held turns back
