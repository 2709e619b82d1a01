"""``client.delete`` leaves a tombstone: WhatsApp's retries of a deleted conversation's webhooks (for about 36
hours) are duplicates, not a conversation brought back; new message ids start afresh."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import fakeredis
import pytest
import redis

from tests.support.redis_server import skip_or_fail
from worker.client import ConversationClient
from worker.envelopes.inputs import decode_envelope
from worker.settings import Settings
from worker.store.redis_store import ConversationStore

CID = "447700900123"


def test_delete_then_retried_ids_are_duplicates_and_new_ids_start_afresh() -> None:
    woken: list[str] = []
    store = ConversationStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix="t")
    client = ConversationClient(store, woken.append)
    client.send_message(CID, "where next?", message_id="wamid.1")
    client.send_event(CID, "The player shared their location: Pump Room", message_id="wamid.2")
    client.send_notice(CID, "Sorry, I can only read text.", message_id="wamid.3")
    client.delete(CID)
    retried = [client.send_message(CID, "where next?", message_id="wamid.1"),
               client.send_event(CID, "The player shared their location: Pump Room", message_id="wamid.2"),
               client.send_notice(CID, "Sorry, I can only read text.", message_id="wamid.3")]
    assert all(r.duplicate for r in retried)
    assert store.inbox(CID) == [] and woken == [CID]  # nothing queued, nobody woken by the retries
    fresh = client.send_message(CID, "hello again", message_id="wamid.4")
    assert not fresh.duplicate and fresh.depth == 1 and woken == [CID, CID]
    assert [decode_envelope(p).text for _, p in store.inbox(CID)] == ["hello again"]


def test_the_tombstone_default_is_two_days() -> None:
    assert Settings().store.delete_tombstone_seconds == 172_800.0


@pytest.fixture
def prefix() -> Iterator[str]:
    r = redis.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=0.5)
    try:
        r.ping()
    except redis.RedisError as exc:
        skip_or_fail(f"no redis-server answers at 127.0.0.1:6379 ({exc})")
    p = f"test{uuid.uuid4().hex[:12]}"
    yield p
    for key in r.scan_iter(match=f"{p}:*", count=1000):
        r.delete(key)
    r.close()


def test_the_setting_sets_how_long_the_tombstone_lives(prefix: str) -> None:
    client = ConversationClient.from_url("redis://127.0.0.1:6379/0", key_prefix=prefix, wake=lambda cid: None,
                                         delete_tombstone_seconds=30)
    client.send_message(CID, "hi", message_id="wamid.1")
    client.delete(CID)
    r = redis.Redis(host="127.0.0.1", port=6379)
    assert 25_000 < r.pttl(client.store.keys(CID).tomb) <= 30_000
    assert client.send_message(CID, "hi", message_id="wamid.1").duplicate
    off = ConversationClient.from_url("redis://127.0.0.1:6379/0", key_prefix=prefix + "off", wake=lambda cid: None,
                                      delete_tombstone_seconds=0)
    try:
        off.send_message(CID, "hi", message_id="wamid.1")
        off.delete(CID)
        assert not off.send_message(CID, "hi", message_id="wamid.1").duplicate  # turned off: as before
    finally:
        for key in r.scan_iter(match=f"{prefix}off:*"):
            r.delete(key)
        r.close()
