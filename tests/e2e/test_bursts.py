"""Bursts end to end: real Celery worker processes, the real Redis, the loopback OpenAI and WhatsApp stand-ins.

Players type in bursts. Each conversation gets bursts of 1-5 messages with random gaps around the quiet period;
which messages share a turn then depends on timing, so the random test checks the invariants that hold whatever
the grouping: every message is introduced by exactly one model request (as user messages, in the order sent),
there is one reply per request, threaded to the last message that request introduced, and nothing is answered
twice. Two fixed-timing tests check the grouping itself: messages 50 ms apart share one turn with coalescing on,
and each gets its own with coalescing off.

``PARLEY_BURST_SEED`` replays a run of the random test (its seed is printed).
"""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from tests.e2e.conftest import Cluster
from tests.support.bursts import introduced, is_summary
from tests.support.store_kit import settled
from tests.support.workers import wait_until

pytestmark = pytest.mark.e2e

QUIET = 0.5
MAX_WAIT = 3.0
BURSTS_ON = {"env": {"PARLEY_BURST_QUIET_SECONDS": str(QUIET), "PARLEY_BURST_MAX_WAIT_SECONDS": str(MAX_WAIT)}}
BURSTS_OFF = {"env": {"PARLEY_BURST_QUIET_SECONDS": "0"}}


def chat_requests(cluster: Cluster, cid: str) -> list[list[str]]:
    """Per chat request of ``cid`` (summaries left out), the user texts it introduced, in request order."""
    with cluster.llm.lock:
        requests = list(cluster.llm.requests)
    out = []
    for r in requests:
        if is_summary(r):
            continue
        new = introduced(r)
        if new and new[0].startswith(f"{cid} "):
            out.append(new)
    return out


def replies(cluster: Cluster, cid: str) -> list[tuple[str, str | None]]:
    """(text, the id of the message it threads to) of every reply WhatsApp received for ``cid``, in order."""
    with cluster.whatsapp.lock:
        sent = [s["body"] for s in cluster.whatsapp.sent if s["body"].get("to") == cid]
    return [(b["text"]["body"], (b.get("context") or {}).get("message_id")) for b in sent]


def check_conversation(cluster: Cluster, cid: str, sent: list[tuple[str, str]]) -> list[list[str]]:
    """The invariants of one conversation whatever the grouping; returns the groups (texts per request)."""
    ids = dict((text, mid) for mid, text in sent)
    groups = chat_requests(cluster, cid)
    flat = [t for g in groups for t in g]
    # Every message in exactly one request, as user messages, in the order sent: nothing lost, nothing twice.
    assert flat == [text for _, text in sent], (cid, groups, sent)
    # One reply per request, answering that request, threaded to the last message it introduced.
    assert replies(cluster, cid) == [(f"ack:{g[-1]}", ids[g[-1]]) for g in groups], (cid, groups, replies(cluster, cid))
    return groups


def send_bursts(cluster: Cluster, cid: str, bursts: list[list[float]], sent: list[tuple[str, str]]) -> None:
    """Send ``bursts`` (each a list of gaps, in seconds, before each of its messages) to ``cid`` as a player
    would: message ids are WhatsApp's wamids, and each message asks to be answered in its own thread."""
    client = cluster.client()
    k = 0
    for b, gaps in enumerate(bursts):
        for i, gap in enumerate(gaps):
            time.sleep(gap)
            mid, text = f"wamid.{cid}.{k}", f"{cid} burst {b} message {i} (#{k})"
            client.send_message(cid, text, message_id=mid, reply_to=mid)
            sent.append((mid, text))
            k += 1


def run_players(cluster: Cluster, plan: dict[str, list[list[float]]]) -> dict[str, list[tuple[str, str]]]:
    """Every conversation's bursts sent at once, one producer thread per player; waits for the sends."""
    sent: dict[str, list[tuple[str, str]]] = {cid: [] for cid in plan}
    threads = [threading.Thread(target=send_bursts, args=(cluster, cid, bursts, sent[cid])) for cid, bursts in plan.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sent


def settle(cluster: Cluster, sent: dict[str, list[tuple[str, str]]], timeout: float = 30) -> None:
    """Wait until every conversation's last message has its answer and nothing is left to happen to it (no input
    waiting, no reply to send, no lease held): from then on, a reply sent twice would already show."""
    store = cluster.store()

    def done() -> bool:
        return all(settled(store, cid) and any(r[1] == s[-1][0] for r in replies(cluster, cid))
                   for cid, s in sent.items() if s)

    assert wait_until(done, timeout, interval=0.1), [w.log()[-3000:] for w in cluster.workers]


@pytest.mark.parametrize("pool", ["threads", "gevent"])
@pytest.mark.parametrize("cluster", [BURSTS_ON], indirect=True)
def test_random_bursts_every_message_in_one_request_in_order(cluster: Cluster, pool: str) -> None:
    seed = int(os.environ.get("PARLEY_BURST_SEED", random.randrange(1 << 30)))
    print(f"[bursts] seed={seed} (PARLEY_BURST_SEED={seed} replays it)")
    rng = random.Random(seed)
    cluster.start_worker("b1", pool=pool)
    cluster.start_worker("b2", pool=pool)
    plan: dict[str, list[list[float]]] = {}
    for i in range(6):
        bursts = []
        for _ in range(4):
            size = rng.randint(1, 5)
            # Gaps inside a burst around the quiet period (some shorter, some longer); a pause between bursts
            # that is sometimes shorter than the quiet period too.
            bursts.append([rng.uniform(0.3, 1.3)] + [rng.uniform(0.02, 1.5 * QUIET) for _ in range(size - 1)])
        plan[f"4477011{i:05d}"] = bursts
    sent = run_players(cluster, plan)
    settle(cluster, sent)
    groups = {cid: check_conversation(cluster, cid, s) for cid, s in sent.items()}
    messages = sum(len(s) for s in sent.values())
    requests = sum(len(g) for g in groups.values())
    sizes = sorted(len(x) for g in groups.values() for x in g)
    print(f"[bursts] pool={pool} messages={messages} requests={requests} group sizes={sizes}")
    assert requests < messages  # some gaps are well under the quiet period: those messages shared a turn


# On RabbitMQ the quiet period's wake-up is a countdown task, which a quorum queue delays with RabbitMQ's native
# delayed delivery (Celery's celery_delayed_* exchanges), not in the worker's memory.
@pytest.mark.parametrize("cluster", [BURSTS_ON, {**BURSTS_ON, "broker": "rabbitmq"}], indirect=True,
                         ids=["redis", "rabbitmq"])
def test_messages_well_within_the_quiet_period_share_one_turn(cluster: Cluster) -> None:
    cluster.start_worker("b1")
    plan = {f"4477012{i:05d}": [[0.0, 0.05, 0.05]] for i in range(4)}
    sent = run_players(cluster, plan)
    settle(cluster, sent)
    for cid, s in sent.items():
        assert check_conversation(cluster, cid, s) == [[text for _, text in s]]
        assert replies(cluster, cid) == [(f"ack:{s[-1][1]}", s[-1][0])]


@pytest.mark.parametrize("cluster", [BURSTS_OFF], indirect=True)
def test_with_coalescing_off_every_message_gets_its_own_request_and_reply(cluster: Cluster) -> None:
    cluster.start_worker("b1")
    plan = {f"4477013{i:05d}": [[0.0, 0.05, 0.05], [0.3, 0.05]] for i in range(4)}
    sent = run_players(cluster, plan)
    settle(cluster, sent)
    for cid, s in sent.items():
        assert check_conversation(cluster, cid, s) == [[text] for _, text in s]
        assert replies(cluster, cid) == [(f"ack:{text}", mid) for mid, text in s]


@pytest.mark.parametrize("cluster", [{"env": {**BURSTS_ON["env"], "PARLEY_RESET_PHRASES": '["start over"]'}}],
                         indirect=True)
def test_a_reset_phrase_inside_a_burst_starts_over_before_the_message_after_it(cluster: Cluster) -> None:
    cluster.start_worker("b1")
    cid = "447701400001"
    before = run_players(cluster, {cid: [[0.0]]})
    settle(cluster, before)
    client = cluster.client()
    client.send_message(cid, "Start over!", message_id="wamid.reset", reply_to="wamid.reset")
    time.sleep(0.05)  # well within the quiet period: one burst
    client.send_message(cid, f"{cid} hi", message_id="wamid.hi", reply_to="wamid.hi")
    settle(cluster, {cid: [("wamid.hi", f"{cid} hi")]})
    assert replies(cluster, cid)[-1] == (f"ack:{cid} hi", "wamid.hi")
    with cluster.llm.lock:
        last = [r for r in cluster.llm.requests if not is_summary(r)][-1]
    said = [str(m.get("content", "")) for m in last["messages"] if m.get("role") != "system"]
    assert said == [f"{cid} hi"]  # the old history and the phrase never reached the model
