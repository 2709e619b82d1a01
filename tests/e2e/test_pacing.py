"""Pacing across the fleet: two real Celery worker processes answer many conversations at once through a loopback
WhatsApp that answers 130429 above the sender number's rate and 131056 above the pair rate. Paced through Redis
at the same limits, the workers together trip neither, while pushing the number to its limit; every reply (the
parts of a long one too) arrives once, in order."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import Cluster
from tests.support.workers import wait_until

pytestmark = pytest.mark.e2e

RATE, BURST = 25, 5  # messages a second from the number, and its burst
PAIR_PER_MINUTE, PAIR_BURST = 120, 2  # two a second to one player
# Sends over the GCRA bound (rate + burst in any second) the stand-in lets pass: arrivals crowd when a send that
# left on its slot reaches the server late (seen: 3 over on a busy machine). Unpaced, the same load ran 160 over.
JITTER = 8
LONG = "Tell me about the theatre. " * 190  # 5,130 characters: the reply goes in two parts

PACED = {"env": {
    "PARLEY_WHATSAPP_MESSAGES_PER_SECOND": str(RATE), "PARLEY_WHATSAPP_BURST": str(BURST),
    "PARLEY_WHATSAPP_RECIPIENT_PER_MINUTE": str(PAIR_PER_MINUTE),
    "PARLEY_WHATSAPP_RECIPIENT_BURST": str(PAIR_BURST),
    # Short enough that both ways of waiting run: slept through, and handed to a later deliver task.
    "PARLEY_WHATSAPP_PACE_MAX_SLEEP": "0.5",
}}


@pytest.mark.parametrize("cluster", [PACED], indirect=True)
def test_two_workers_together_stay_under_the_platforms_limits(cluster: Cluster) -> None:
    # The stand-in's limits are the configured ones, with room for the jitter of arrival times (JITTER): a fleet
    # pacing per process (twice the rate) or not at all would still trip them.
    cluster.whatsapp.limit(per_second=RATE, allowance=BURST + JITTER, pair_per_second=PAIR_PER_MINUTE / 60,
                           pair_allowance=PAIR_BURST + 2)
    cluster.start_worker("w1")
    cluster.start_worker("w2", pool="gevent", concurrency=100)  # a mixed fleet: sleeps are greenlet sleeps here
    client = cluster.client()
    conversations = [f"4477009{i:05d}" for i in range(30)]
    asked = ["first " + LONG, "where next?", "and then?", "which door?", "is it open?", "thanks"]
    start = time.monotonic()
    for n, text in enumerate(asked):
        for cid in conversations:
            client.send_message(cid, text, message_id=f"{cid}-m{n}")
    total = len(conversations) * (len(asked) + 1)  # the long reply is two messages

    assert wait_until(lambda: len(cluster.whatsapp.sent) >= total, 120), (
        len(cluster.whatsapp.sent), cluster.whatsapp.throttled[:5], [w.log()[-3000:] for w in cluster.workers])
    took = time.monotonic() - start
    assert cluster.whatsapp.throttled == []
    for cid in conversations:
        texts = cluster.whatsapp.texts_for(cid)
        assert len(texts) == len(asked) + 1 and "".join(texts[:2]).replace(" ", "") == (
            f"ack:first {LONG}".strip().replace(" ", "")), texts[:1]
        assert texts[2:] == [f"ack:{t}" for t in asked[1:]], texts
    # The workers pushed the number to its limit (so the stand-in would have seen an overload) and no further.
    busiest = cluster.whatsapp.busiest(1.0)
    assert RATE * 0.8 <= busiest <= RATE + BURST + JITTER, busiest
    assert took >= (total - BURST) / RATE * 0.9, took
    assert all(w.alive() for w in cluster.workers)
