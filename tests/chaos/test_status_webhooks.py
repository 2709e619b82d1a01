"""No reply seen twice: real workers SIGKILLed over and over, some of them right between a send and its sent mark,
while the loopback WhatsApp posts each accepted send's status webhooks (``sent``, then ``delivered``, carrying the
``biz_opaque_callback_data`` the send had) back to the real ingress app, signed with the app secret as Meta does.

With ``PARLEY_STATUS_WEBHOOKS=true`` no part reaches the loopback WhatsApp twice: every part a kill left in flight is
marked sent from its status instead of resent (or resent after the grace when it never went out). With it off, the
same kills resend (today's behaviour) and every resend is counted by a worker as a crash inside the send window.

Two kinds of kill: aimed (the loopback WhatsApp has recorded the send and kills the worker that made it before the
answer goes back, so the sent mark can never happen; each worker sends from its own phone number id, which tells
the loopback which one it was) and at random moments. A supervisor thread restarts killed workers.
``PARLEY_CHAOS_SCALE`` scales the run (CI: 1); each scenario prints its figures (``-s``).
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections import Counter
from typing import Any

import pytest

from tests.chaos.harness import Load, Outcome, run_scenario
from tests.chaos.test_chaos import SCALE, report
from tests.e2e.conftest import Cluster
from tests.support.status_webhooks import IngressServer, StatusPoster
from worker.service.deliver.inflight import SAVED_LOG

pytestmark = pytest.mark.e2e

SECRET = "chaos-app-secret"
PHONE = "10654035224292"  # worker i sends from phone number id PHONE + str(i)
GRACE = "4"  # seconds; the default is 10. A dead worker's delivery lease (5 s here) runs out before the first look


class Killer:
    """SIGKILLs workers: ``aimed`` inside the loopback WhatsApp's answer to a send (between the send and its sent
    mark), ``random`` from a chaos thread. The harness's supervisor starts them again."""

    def __init__(self, cluster: Cluster, poster: StatusPoster, *, aim: float) -> None:
        self.cluster, self.poster, self.aim = cluster, poster, aim
        self.aimed = 0
        self.random = 0
        self.lock = threading.Lock()

    def kill(self, index: int) -> bool:
        """Kill worker ``index`` now, once it has been up a moment (a worker still starting sends nothing)."""
        with self.lock:
            if index >= len(self.cluster.workers):
                return False
            w = self.cluster.workers[index]
            proc = w.proc
            if proc is None or proc.poll() is not None:
                return False
            w.kill(signal.SIGKILL)
            proc.wait(10)
            return True

    def on_sent(self, sent: dict[str, Any]) -> None:
        """Runs in the loopback WhatsApp once it recorded a send, before it answers: its statuses are on their
        way whatever happens next; sometimes the worker that sent it dies now."""
        self.poster.sent(sent)
        index = int(str(sent["path"]).split("/")[-2].removeprefix(PHONE) or 0)
        if random.random() < self.aim and self.kill(index):
            with self.lock:
                self.aimed += 1

    def chaos(self, c: Cluster, stop: threading.Event, out: Outcome) -> None:
        while not stop.wait(random.uniform(0.5, 1.2)):
            if self.kill(random.randrange(len(c.workers))):
                with self.lock:
                    self.random += 1


def _run(cluster: Cluster, *, aim: float, seconds: float, conversations: int) -> tuple[Outcome, Killer, StatusPoster]:
    cluster.env["PARLEY_MAX_ATTEMPTS"] = "20"  # a kill takes every turn of its worker with it: not poison inputs
    ingress = IngressServer(cluster.client(), app_secret=SECRET).start()
    poster = StatusPoster(ingress.url, app_secret=SECRET).start()
    killer = Killer(cluster, poster, aim=aim)
    cluster.whatsapp.on_sent = killer.on_sent
    for server in (cluster.whatsapp.http.server, cluster.llm.http.server):  # killed clients reset connections
        server.handle_error = lambda *a: None  # type: ignore[method-assign]
    inputs_per = 6
    try:
        # The producer paces its inputs over ``seconds``: the chaos lasts as long.
        out = run_scenario(cluster, Load(conversations=conversations, inputs_per=inputs_per, event_every=3,
                                         pace=seconds / (conversations * inputs_per), settle_timeout=180,
                                         worker_env=lambda i: {"WHATSAPP_PHONE_NUMBER_ID": f"{PHONE}{i}"}),
                           killer.chaos)
        out.faults = killer.aimed + killer.random
        assert poster.drain(), "status webhooks still queued"
    finally:
        poster.stop()
        ingress.stop()
    return out, killer, poster


def _part_duplicates(cluster: Cluster) -> tuple[int, int]:
    """(parts that reached the loopback WhatsApp more than once, sends without callback data)."""
    with cluster.whatsapp.lock:
        tags = [s["body"].get("biz_opaque_callback_data") for s in cluster.whatsapp.sent]
    return sum(n - 1 for n in Counter(tags).values() if n > 1), tags.count(None)


def _saves(cluster: Cluster) -> int:
    return sum(w.log().count(SAVED_LOG) for w in cluster.workers)


@pytest.mark.parametrize("cluster", [{"env": {"PARLEY_STATUS_WEBHOOKS": "true", "PARLEY_RESEND_GRACE_SECONDS": GRACE}}],
                         indirect=True)
def test_no_part_reaches_whatsapp_twice_through_sigkills_with_status_webhooks(cluster: Cluster) -> None:
    started = time.monotonic()
    out, killer, poster = _run(cluster, aim=0.2, seconds=24 * SCALE, conversations=int(10 * SCALE))
    duplicates, untagged = _part_duplicates(cluster)
    saves = _saves(cluster)
    report("status-webhooks-on", out)
    print(f"[chaos] status-webhooks-on: kills={out.faults} (aimed between send and mark={killer.aimed}, "
          f"random={killer.random}) part_duplicates={duplicates} saves={saves} resends={out.window_hits} "
          f"statuses_posted={poster.posted} refused={poster.refused} lost={poster.lost} "
          f"seconds={time.monotonic() - started:.1f} scale={SCALE}")
    out.assert_safe()
    assert untagged == 0
    assert duplicates == 0 and out.replies_duplicated == 0, out.line()
    assert killer.aimed >= 1 and saves >= 1, (killer.aimed, saves)  # the window was hit, and recovered from
    assert out.faults >= (30 if SCALE >= 2 else 20), out.faults  # CI (scale 1) usually lands 30 or more too
    # Every message's latest status is the last one posted, whatever order the ingress saw them in.
    store = cluster.store()
    cids = [f"4477{i:08d}" for i in range(int(10 * SCALE))]
    assert {s.status for c in cids for s in store.statuses(c, 1000)} == {"delivered"}


@pytest.mark.parametrize("cluster", [{"env": {"PARLEY_STATUS_WEBHOOKS": "false"}}], indirect=True)
def test_without_status_webhooks_resends_stay_within_the_counted_window(cluster: Cluster) -> None:
    """The same kills with status webhooks off (the ingress still records them; nobody consults them): a part
    killed between its send and its mark is resent, today's bounded and counted duplicate."""
    started = time.monotonic()
    out, killer, _ = _run(cluster, aim=0.25, seconds=10 * SCALE, conversations=int(6 * SCALE))
    duplicates, _ = _part_duplicates(cluster)
    report("status-webhooks-off", out)
    print(f"[chaos] status-webhooks-off: kills={out.faults} (aimed={killer.aimed}, random={killer.random}) "
          f"part_duplicates={duplicates} resends={out.window_hits} seconds={time.monotonic() - started:.1f} "
          f"scale={SCALE}")
    out.assert_safe()  # replies sent twice <= crashes counted inside the send window
    assert duplicates <= out.window_hits and _saves(cluster) == 0
    assert killer.aimed >= 1 and duplicates >= 1, (killer.aimed, duplicates)  # the window is real without them
