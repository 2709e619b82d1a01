"""The worker's logic with conversation state on a real Redis Cluster (three masters)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.redis_cluster import LocalCluster
from tests.support.redis_server import skip_or_fail
from tests.worker.conftest import make_harness
from worker import ScriptedModel, Summarize
from worker.conversation.state import decode_state


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    if not LocalCluster.available():
        skip_or_fail("redis-server and redis-cli are needed for a local cluster")
    c = LocalCluster().start()
    yield c
    c.stop()


def test_turns_events_compaction_and_delivery_on_a_cluster(cluster: LocalCluster) -> None:
    summarizer = ScriptedModel(default="summary")
    h = make_harness(redis_client=cluster.client(), compactor=Summarize(summarizer, keep_last=2, batch=2))
    cids = [f"44770090{i:04d}" for i in range(30)]  # spread over all three masters' slots
    for n in range(6):
        for cid in cids:
            if n == 1:
                h.client.send_event(cid, f"{cid} tagged Harrogate Theatre", pinned=True)
            h.client.send_message(cid, f"{cid} q{n}", message_id=f"{cid}-{n}")
    h.run()
    for cid in cids:
        assert [t for r, t, _ in h.channel.sent if r == cid] == [f"ack:{cid} q{n}" for n in range(6)]
        st = decode_state(h.store.read_state(cid).blob)
        assert st.summary == "summary" and st.meta.turns == 6
    nodes = {cluster.client().keyslot(f"parley:{{{cid}}}:state") // 5462 for cid in cids}
    assert len(nodes) == 3
    h.client.delete(cids[0])
    assert h.store.read_state(cids[0]).blob is None
