"""Fair scheduling end to end: one worker slot, one flooding conversation, quiet conversations queued behind it.

A worker slot that drains a conversation until its mailbox is empty serves a flood (a game engine pushing events, a
player pasting a hundred lines) while everyone queued behind waits for all of it. With ``PARLEY_DRAIN_MAX_TURNS``
the flood's drain hands the conversation back after its share, behind the quiet conversations' wake-ups. The
unbounded run is the control: there the quiet replies come only after the whole flood, so the bounded assertion is
one that can fail. Either way every flood message is answered once, in order.
"""

from __future__ import annotations

import pytest

from tests.e2e.conftest import Cluster
from tests.support.workers import wait_until

pytestmark = pytest.mark.e2e

FLOOD = 120
SHARE = 10
QUIET = ["447700900001", "447700900002", "447700900003"]


@pytest.mark.parametrize("bounded", [True, False], ids=["bounded", "unbounded"])
def test_quiet_conversations_are_answered_while_a_flood_still_waits(cluster: Cluster, bounded: bool) -> None:
    cluster.llm.delay = 0.02  # a turn costs something, so the flood's backlog builds up behind the producer
    limit = str(SHARE) if bounded else "0"
    cluster.start_worker("w1", concurrency=1, env={"PARLEY_DRAIN_MAX_TURNS": limit, "PARLEY_DRAIN_MAX_SECONDS": "0"})
    client = cluster.client()
    flood = "447700900099"
    for i in range(FLOOD):
        client.send_message(flood, f"{flood} line {i}", message_id=f"f{i}")
    for cid in QUIET:
        client.send_message(cid, f"{cid} hello", message_id=f"{cid}-q")
    total = FLOOD + len(QUIET)
    assert wait_until(lambda: len(cluster.whatsapp.sent) >= total, 120), (
        len(cluster.whatsapp.sent), [w.log()[-3000:] for w in cluster.workers])

    assert cluster.whatsapp.texts_for(flood) == [f"ack:{flood} line {i}" for i in range(FLOOD)]
    with cluster.whatsapp.lock:
        order = [s["body"]["to"] for s in cluster.whatsapp.sent]
    assert len(order) == total  # nothing answered twice
    flood_positions = [n for n, to in enumerate(order) if to == flood]
    quiet_positions = [order.index(cid) for cid in QUIET]
    if bounded:
        # Answered after the flood's first share or two, not after all of it.
        assert max(quiet_positions) < flood_positions[3 * SHARE], (quiet_positions, SHARE)
    else:
        assert min(quiet_positions) > flood_positions[-1], quiet_positions
