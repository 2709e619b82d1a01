"""Chaos and fault scenarios under load, checked like a Jepsen queue checker (see harness.py).

The short version runs in CI; ``PARLEY_CHAOS_SCALE=5 scripts/test tests/chaos`` runs the long one.
Each scenario prints its figures (``-s`` shows them).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import signal
import threading
import time
from collections import Counter

import msgpack
import pytest
import redis

from tests.chaos.harness import (
    Load,
    Outcome,
    part_duplicates_beyond_resends,
    run_scenario,
    sigkill_at_random,
    window_hits,
)
from tests.chaos.stall import LeaseHolderStopper
from tests.e2e.conftest import BROKERS, Cluster
from tests.support.store_kit import raw
from tests.support.workers import wait_until
from worker.settings import Drain

pytestmark = pytest.mark.e2e

SCALE = float(os.environ.get("PARLEY_CHAOS_SCALE", "1"))
#: What a stopped worker logs, woken, when another took its work over while it slept: a turn's commit fenced off
#: (its lease ran out), or a delivery's sent mark fenced off (the task ends with the error Celery logs).
TAKEN_OVER = re.compile(r"lease lost; another worker owns the conversation"
                        r"|raised unexpected: StaleLeaseError\('deliver[^']* was taken over'\)")


def load(**kw: object) -> Load:
    base = Load(conversations=int(20 * SCALE), inputs_per=int(10 * max(1.0, SCALE / 2)))
    for k, v in kw.items():
        setattr(base, k, v)
    return base


def report(name: str, out: Outcome) -> None:
    line = f"[chaos] {name}: {out.line()}"
    print(line)
    path = os.environ.get("PARLEY_CHAOS_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"scenario": name, **{k: v for k, v in out.__dict__.items() if k != "notes"}}) + "\n")


@BROKERS
def test_sigkill_workers_at_random_moments(cluster: Cluster) -> None:
    out = run_scenario(cluster, load(pace=0.03), sigkill_at_random)
    report(f"sigkill ({cluster.broker})", out)
    assert out.faults >= 3
    out.assert_safe()


@BROKERS
def test_stalled_worker_past_its_lease(cluster: Cluster) -> None:
    cluster.llm.delay = 0.3  # turns take a while, so a worker stopped while the model answers is stopped mid-turn
    # The stop is aimed from inside the model stand-in, at the worker whose turn request it is answering, once Redis
    # shows that turn holds its conversation's lease (a worker guessed at may hold nothing: then nothing is taken
    # over and the scenario shows nothing).
    stopper = LeaseHolderStopper(cluster)
    cluster.llm.on_request = stopper.on_request

    def chaos(c: Cluster, stop: threading.Event, out: Outcome) -> None:
        while not stop.is_set():
            stall = stopper.stop_next(timeout=1.0)
            if stall is None:
                continue
            out.landed("sigstop")
            # Past the 5 s lease and many 1 s sweep intervals: another worker has taken the conversation over before
            # the stopped one wakes (the fence is watched meanwhile).
            stopper.hold(stall, 16.5)
            print(f"[chaos] sigstop ({c.broker}): {stall.line()}")

    out = run_scenario(cluster, load(pace=0.03, ready_first=True), chaos)
    # A stop landed mid-work: the stopped worker, woken, found its turn or delivery taken over. The scenario can end
    # (every input answered by the worker that took over) a moment after the last stopped worker is woken, before that
    # worker has read its model answer and tried to commit: wait for its log rather than read it at once.
    stopped = [w for w in cluster.workers if any(s.worker == w.name for s in stopper.stalls)]
    wait_until(lambda: all(TAKEN_OVER.search(w.log()) for w in stopped), 30)
    taken_over = sum(len(TAKEN_OVER.findall(w.log())) for w in cluster.workers)
    out.fault_kinds["taken_over"] = taken_over
    report(f"sigstop ({cluster.broker})", out)
    print(f"[chaos] sigstop ({cluster.broker}): {stopper.misses_line()}")
    out.assert_safe()
    stalls = "; ".join(s.line() for s in stopper.stalls)
    assert stopper.stalls, ("the fault did not land: no worker was stopped while it held a lease mid-turn "
                            f"({stopper.misses_line()}) {out.line()}")
    assert all(s.handed_over_after is not None for s in stopper.stalls), \
        f"a stopped worker's conversation was not taken over while its lease had run out: {stalls}"
    assert taken_over >= 1, f"handed over, but no woken worker logged its turn or delivery fenced off: {stalls}"


def test_a_stalled_workers_conversation_is_taken_over_while_its_player_keeps_writing(cluster: Cluster) -> None:
    """The sweeper hands a stalled worker's conversation over even while new inputs keep arriving for it more often
    than the sweep age (1 s here): an input queued behind others sends no wake-up, so the sweeper is the only way
    out, and an input must not restart its clock (it did: the conversation waited until the player paused)."""
    cluster.llm.delay = 0.3
    stopper = LeaseHolderStopper(cluster)
    cluster.llm.on_request = stopper.on_request
    for i in range(2):
        cluster.start_worker(f"w{i}", concurrency=4)
    assert wait_until(lambda: all(" ready." in w.log() for w in cluster.workers), 60)
    client, store = cluster.client(), cluster.store()
    cid = "447700777000"
    client.send_message(cid, f"{cid} q0", message_id="m0")
    stall = stopper.stop_next(timeout=30)
    assert stall is not None, f"the fault did not land: {stopper.misses_line()}"
    sent = 1
    while raw(store).get(store.keys(cid).fence) == stall.token and sent < 40:  # the player writes every 0.5 s
        client.send_message(cid, f"{cid} q{sent}", message_id=f"m{sent}")
        sent += 1
        time.sleep(0.5)
    if raw(store).get(store.keys(cid).fence) != stall.token:
        stall.handed_over_after = time.monotonic() - stall.at
    stopper.hold(stall, 0)  # wake it
    print(f"[chaos] stalled-while-writing: {stall.line()} ({sent} inputs)")
    assert stall.handed_over_after is not None, \
        f"a stalled worker's conversation was not taken over in {sent} inputs 0.5 s apart: {stall.line()}"
    want = [f"ack:{cid} q{n}" for n in range(sent)]
    assert wait_until(lambda: set(want) <= set(cluster.whatsapp.texts_for(cid)), 60), cluster.whatsapp.texts_for(cid)
    assert list(dict.fromkeys(cluster.whatsapp.texts_for(cid))) == want
    stalled = next(w for w in cluster.workers if w.name == stall.worker)
    assert wait_until(lambda: TAKEN_OVER.search(stalled.log()), 30), "the woken worker's commit was not fenced off"
    windows = window_hits(w.log() for w in cluster.workers)
    assert part_duplicates_beyond_resends(cid, cluster.whatsapp.parts_for(cid), windows) == []


@pytest.mark.parametrize("cluster", [{"env": {"PARLEY_VISIBILITY_TIMEOUT": "2", "PARLEY_BROKER_RESTORE_INTERVAL": "1",
                                               "PARLEY_BROKER_RESTORE_THROTTLE": "1"}}], indirect=True)
def test_task_outliving_the_visibility_timeout(cluster: Cluster) -> None:
    cluster.llm.delay = 3.0  # every turn outlives the 2 s visibility timeout: Celery redelivers its message
    out = run_scenario(cluster, load(conversations=6, inputs_per=4, event_every=0))
    report("visibility-timeout", out)
    out.assert_safe()
    import collections
    import re

    logs = "".join(w.log() for w in cluster.workers)
    received = collections.Counter(re.findall(r"Task parley\.drain\[([0-9a-f-]+)\] received", logs))
    assert "Retry in" not in logs  # no task retried itself: a repeated id is the broker's redelivery
    assert max(received.values()) >= 2, received


#: A Lua script that keeps Redis busy for ARGV[1] ms: a stall of the whole server, like DEBUG SLEEP, which Redis 7
#: refuses unless started with ``enable-debug-command`` (the machine's redis-server is not).
STALL_SCRIPT = """
local t = redis.call('TIME')
local until_us = t[1] * 1000000 + t[2] + ARGV[1] * 1000
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= until_us
return 1
"""
REDIS_FAULTS = ("kill", "pause", "stall", "restart")
REDIS_FAULT_MIX = ("kill", "pause", "stall", "kill", "pause", "stall", "restart")  # a restart is the slowest


@pytest.mark.parametrize("cluster", [{"appendonly": True}], indirect=True)
def test_redis_faults(cluster: Cluster) -> None:
    admin = redis.Redis(port=cluster.redis.port)

    def fault(c: Cluster, kind: str) -> bool:
        """Inject one fault of ``kind``; whether it landed."""
        if kind == "kill":
            return bool(admin.client_kill_filter(_type="normal", skipme=True))  # the connections it closed
        if kind == "pause":
            return bool(admin.client_pause(400))
        if kind == "stall":
            started = time.monotonic()
            admin.eval(STALL_SCRIPT, 0, 300)
            return time.monotonic() - started >= 0.3
        old = admin.info("server")["run_id"]
        c.redis.stop()  # SIGTERM: the append-only file is flushed
        time.sleep(0.5)
        c.redis.start()
        return bool(admin.info("server")["run_id"] != old)

    def chaos(c: Cluster, stop: threading.Event, out: Outcome) -> None:
        overtime = 0
        for i in itertools.count():
            kind = REDIS_FAULTS[i] if i < len(REDIS_FAULTS) else random.choice(REDIS_FAULT_MIX)
            if stop.wait(random.uniform(0.5, 1.0)):
                # Each kind at least once, even if the producer is done first (one that never lands gives up).
                missing = [k for k in REDIS_FAULTS if k not in out.fault_kinds]
                overtime += 1
                if not missing or overtime > 10:
                    return
                time.sleep(0.5)
                kind = missing[0]
            try:
                if fault(c, kind):
                    out.landed(kind)
                else:
                    out.notes.append(f"{kind}: did not land")
            except redis.RedisError as exc:
                out.notes.append(f"{kind}: {exc}")

    out = run_scenario(cluster, load(pace=0.03), chaos)
    report("redis-faults", out)
    out.assert_safe()
    assert all(out.fault_kinds.get(k, 0) >= 1 for k in REDIS_FAULTS), (out.fault_kinds, out.notes)
    # Workers ride out a Redis restart. With Celery's remote control on, the pub/sub reconnect crashed one in
    # about every other run ("Unrecoverable error: 'NoneType' object has no attribute 'hostname'"); Parley
    # turns remote control off by default (PARLEY_REMOTE_CONTROL).
    assert not [n for n in out.notes if n.startswith("restarted")], out.notes


def test_llm_faults(cluster: Cluster) -> None:
    down_until = [0.0]
    served: dict[str, int] = {}  # the faults requests met, by kind
    lock = threading.Lock()

    def met(kind: str, answer: object) -> object:
        with lock:
            served[kind] = served.get(kind, 0) + 1
        return answer

    def fault(body: dict[str, object]) -> object:
        if "running summary" in json.dumps(body):
            return None
        met("request", None)
        if time.monotonic() < down_until[0]:
            return met("outage", (503, {"error": {"message": "provider down"}}, {}))
        r = random.random()
        if r < 0.10:
            return met("429", (429, {"error": {"message": "slow down", "type": "rate_limit_exceeded"}},
                               {"Retry-After": "0.2"}))
        if r < 0.20:
            return met("500", (500, {"error": {"message": "boom"}}, {}))
        if r < 0.25:
            return met("truncated", ("raw", 200, b'{"choices": [{"message": {"role": "assis'))
        return None

    cluster.llm.fault = fault

    def chaos(c: Cluster, stop: threading.Event, out: Outcome) -> None:
        # The provider goes down for a while, once turns are running (before, no request would meet the outage).
        while not stop.wait(0.1) and not served:
            pass
        stop.wait(0.5)
        down_until[0] = time.monotonic() + 4.0 * SCALE

    out = run_scenario(cluster, load(pace=0.03, ready_first=True), chaos)
    requests = served.pop("request", 0)
    out.fault_kinds.update(served)
    out.faults = sum(served.values())
    report("llm-faults", out)
    print(f"[chaos] llm-faults: {requests} turn requests, faults met: {served}")
    out.assert_safe()
    # Every kind of fault met requests: the outage too (it counts only if some request arrived while it lasted).
    assert all(served.get(k, 0) >= 1 for k in ("outage", "429", "500", "truncated")), served


def test_whatsapp_faults(cluster: Cluster) -> None:
    blocked = "447700000003"
    # A send fails at random one time in four, and a reply is dead-lettered after DELIVERY_MAX_ATTEMPTS (8) failed
    # sends: by chance alone about 1 run in 100 at scale 3 (0.25^8 x ~700 replies) gave up on one and failed the
    # scenario. The same reply is therefore failed at most 6 times: every reply but the blocked ones can go out.
    failed: Counter[str] = Counter()  # a part's body (its callback data names the part) -> sends failed
    lock = threading.Lock()  # the stand-in answers each connection in a thread of its own

    def fault(body: dict[str, object]) -> object:
        if body.get("to") == blocked:
            return (400, {"error": {"message": "(#131047) Re-engagement message", "code": 131047}}, {})
        same = json.dumps(body, sort_keys=True)
        with lock:
            if failed[same] >= 6:
                return None
            failed[same] += 1
        r = random.random()
        if r < 0.15:
            return (400, {"error": {"message": "(#130429) Rate limit hit", "code": 130429}}, {})
        if r < 0.25:
            return (500, {"error": {"message": "internal"}}, {})
        with lock:
            failed[same] -= 1
        return None

    cluster.whatsapp.fault = fault
    # Every reply to the blocked recipient is dead-lettered (131047), and nothing else is.
    out = run_scenario(cluster, load(expect_dead=lambda cid, d: cid == blocked and d.what == "reply"
                                     and "131047" in d.reason))
    report("whatsapp-faults", out)
    out.assert_safe()
    store = cluster.store()
    from worker.envelopes.inputs import decode_dead_letter

    dead = [decode_dead_letter(d) for d in store.dead_letters(blocked)]
    assert dead and all(d.what == "reply" and "131047" in d.reason for d in dead)
    assert cluster.whatsapp.texts_for(blocked) == []


def test_compaction_racing_with_new_turns(cluster: Cluster) -> None:
    cluster.llm.summary_delay = 1.0  # slow summariser while inputs keep arriving
    out = run_scenario(cluster, load(conversations=8, inputs_per=int(20 * SCALE), pace=0.01))
    report("compaction-race", out)
    out.assert_safe()
    store = cluster.store()
    from worker.conversation.state import decode_state

    cids = [f"4477{i:08d}" for i in range(8)]
    # A compaction still being computed when the mailboxes emptied lands a moment later: wait for it.

    assert wait_until(lambda: not any(raw(store).exists(store.keys(c).compacting) or store.inbox_depth(c) for c in cids),
                      30, interval=0.1)
    compactions = sum(decode_state(store.read_state(c).blob).meta.compactions for c in cids)
    splices = [t for c in cids for t in (msgpack.unpackb(x, raw=False) for x in store.trace(c, 10_000)) if "splice" in t]
    raced = [t for t in splices if t["splice"] and t["kept_new"]]
    print(f"[chaos] compaction-race: {compactions} compactions, {len(splices)} splices, {len(raced)} raced")
    # The race happened: a compaction computed off to the side landed after newer turns, and kept them.
    assert compactions >= 2 and raced, splices


def test_poison_input_is_dead_lettered_and_later_inputs_proceed(cluster: Cluster) -> None:
    poisoned = []

    def on_request(body: dict[str, object]) -> None:
        if "POISON" in json.dumps(body.get("messages", [])[-1:]):
            poisoned.append(1)
            for w in cluster.workers:  # the input crashes whichever process touches it
                w.kill(signal.SIGKILL)
            threading.Timer(0.3, lambda: [w.start() for w in cluster.workers]).start()

    cluster.llm.on_request = on_request
    for i in range(2):
        cluster.start_worker(f"p{i}", concurrency=4)
    client = cluster.client()
    cid = "447700999000"
    client.send_message(cid, "before", message_id="a")
    client.send_message(cid, "POISON pill", message_id="poison")
    client.send_message(cid, "after", message_id="b")

    assert wait_until(lambda: "ack:after" in cluster.whatsapp.texts_for(cid), 120), [w.log() for w in cluster.workers]
    sent = cluster.whatsapp.texts_for(cid)
    # A kill may land between WhatsApp's answer and the sent mark of "before": then it is resent, and counted.
    windows = window_hits(w.log() for w in cluster.workers)
    window = sum(windows.values())
    assert part_duplicates_beyond_resends(cid, cluster.whatsapp.parts_for(cid), windows) == []
    # The poison pill is dead-lettered, and its sender gets the configured apology instead of silence.
    apology = Drain().dead_letter_reply
    assert sorted(set(sent)) == sorted(["ack:after", "ack:before", apology]) and len(sent) - 3 <= window, (sent, window)
    assert sent.index("ack:before") < sent.index(apology) < sent.index("ack:after")
    from worker.envelopes.inputs import decode_dead_letter

    dead = [decode_dead_letter(d) for d in cluster.store().dead_letters(cid)]
    assert [(d.id, d.reason) for d in dead] == [("poison", "too_many_attempts")]
    assert 1 <= len(poisoned) <= 5  # at most K attempts, no hot loop


def test_concurrent_duplicate_submissions(cluster: Cluster) -> None:
    cluster.start_worker("d1")
    client = cluster.client()
    cid = "447700888000"

    def submit() -> None:
        for n in range(20):
            client.send_message(cid, f"{cid} q{n}", message_id=f"dup-{n}")

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert wait_until(lambda: len(cluster.whatsapp.texts_for(cid)) >= 20, 60)
    time.sleep(1.0)
    assert cluster.whatsapp.texts_for(cid) == [f"ack:{cid} q{n}" for n in range(20)]
