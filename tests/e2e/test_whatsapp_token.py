"""End to end: a Celery worker process against the loopback WhatsApp stand-in that rejects the access token (190),
then accepts it. The replies of every conversation wait (nothing dead-lettered), the worker's gauge and one log line
say why, and once the token works they go out by themselves, once each, in order. A photo refused for the token
holds its turn the same way instead of being answered from its caption."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.e2e.conftest import Cluster
from tests.support.redis_server import free_port
from tests.support.workers import wait_until
from worker.channels.token import ACCEPTED_LOG, REJECTED_LOG
from worker.envelopes.inputs import Media

pytestmark = pytest.mark.e2e

CIDS = ("447700900601", "447700900602")


def gauge(port: int) -> float | None:
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1).text
    except httpx.HTTPError:
        return None
    for line in text.splitlines():
        if line.startswith('parley_whatsapp_token_rejected{phone_number_id="106540352242922"} '):  # the cluster's
            return float(line.split()[1])
    return None


def test_a_rejected_token_holds_every_reply_until_it_works_then_each_goes_out_once_in_order(cluster: Cluster) -> None:
    port = free_port()
    # Fewer attempts than refusals: a reply counted against its retry limit would be dead-lettered.
    worker = cluster.start_worker("w1", env={"PARLEY_METRICS_PORT": str(port), "PARLEY_DELIVERY_MAX_ATTEMPTS": "2"})
    wa = cluster.whatsapp
    wa.fail(190, status=401, times=8, message="Error validating access token: Session has expired")
    client = cluster.client()
    for i in range(3):
        for cid in CIDS:
            client.send_message(cid, f"{cid} m{i}", message_id=f"{cid}-m{i}")
    assert wait_until(lambda: gauge(port) == 1.0, 30), worker.log()
    assert wa.sent == []
    assert wait_until(lambda: len(wa.sent) >= 6, 90), (len(wa.received), worker.log())
    time.sleep(1.0)  # nothing more comes
    for cid in CIDS:
        assert wa.texts_for(cid) == [f"ack:{cid} m{i}" for i in range(3)]
    assert len(wa.received) == 8 + 6
    store = cluster.store()
    assert all(store.dead_letters(cid) == [] and store.outbox_depth(cid) == 0 for cid in CIDS)
    assert wait_until(lambda: gauge(port) == 0.0, 10)
    log = worker.log()
    assert log.count(REJECTED_LOG) == 1 and log.count(ACCEPTED_LOG) == 1, log


def test_a_photo_refused_for_the_token_waits_for_it_instead_of_using_the_caption(cluster: Cluster) -> None:
    worker = cluster.start_worker("w1")
    wa = cluster.whatsapp
    wa.add_media("1003383421387256", b"\xff\xd8\xff\xe0 a theatre")
    wa.access_token = "a token the worker does not have"  # rotated at Meta, not yet in the worker
    client = cluster.client()
    client.send_message(CIDS[0], "is this the stage door?", message_id="wamid.photo",
                        media=Media(id="1003383421387256", mime_type="image/jpeg"))
    assert wait_until(lambda: len(wa.gets) >= 3, 30), worker.log()  # refused, retried, refused again
    assert cluster.llm.requests == [] and wa.sent == [] and cluster.store().dead_letters(CIDS[0]) == []
    wa.access_token = "test-token"  # fixed
    assert wait_until(lambda: len(wa.sent) >= 1, 60), worker.log()
    assert wa.texts_for(CIDS[0]) == ["ack:is this the stage door?"]
    [request] = cluster.llm.requests
    assert "image_url" in str(request["messages"])  # the model saw the photo, not the caption alone
    assert [p for p, _ in wa.gets][-2:] == ["/v21.0/1003383421387256", "/download/1003383421387256"]
