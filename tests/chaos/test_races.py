"""The lost wake-up, on a real redis-server, with no sweeper to rescue a stranded input.

A producer pushes an input while the drainer is finishing: its wake-up finds the lease still held and ends,
so the drainer's last commit (which gives the lease up when the mailbox is empty, in the same script) must
notice the push and hand it back. The test puts a push (and its wake-up)
into exactly that window for every conversation — thousands of races — with eight drainer threads taking
wake-ups like Celery workers would.
"""

from __future__ import annotations

import queue
import threading
import uuid

import msgpack
import pytest
import redis

from tests.configs import bare_config
from tests.support.redis_server import start_redis
from worker import Chat, ScriptedModel
from worker.client import ConversationClient
from worker.service import ConversationService
from worker.store.redis_store import ConversationStore
from worker.testing import RecordingChannel


@pytest.fixture(scope="module")
def redis_url():  # type: ignore[no-untyped-def]
    server = start_redis()
    yield server.url
    server.stop()


def test_no_input_is_stranded_by_enqueue_finish_races(redis_url: str) -> None:
    store = ConversationStore(redis.Redis.from_url(redis_url), prefix=f"race{uuid.uuid4().hex[:6]}")
    wakeups: queue.Queue[str | None] = queue.Queue()
    chat = Chat(model=ScriptedModel(), auto_compact=False)
    service = ConversationService(store, chat, RecordingChannel(), lambda kind, cid: None, bare_config())
    client = ConversationClient(store, wakeups.put)
    racing_client = ConversationClient(store, lambda cid: None)  # its wake-up is delivered by hand below
    pushed: set[str] = set()
    lock = threading.Lock()
    busy = [0]
    real_commit = store.commit
    real_begin = store.begin

    def begin(cid: str, lease_ms: int, **kw):  # type: ignore[no-untyped-def]
        b = real_begin(cid, lease_ms, **kw)
        if b.status == "busy":
            with lock:
                busy[0] += 1
        return b

    def commit_with_a_push_in_the_window(cid: str, token: int, **kw):  # type: ignore[no-untyped-def]
        with lock:
            first = cid not in pushed
            pushed.add(cid)
        if first:
            # The drainer is finishing the last input it knows of. Now a push, and its wake-up taken by another
            # worker right away, while we still hold the lease: that worker is turned away.
            other = threading.Thread(target=service.drain, args=(cid,))
            racing_client.send_event(cid, "second", message_id=f"{cid}-2")
            other.start()
            other.join()
        return real_commit(cid, token, **kw)

    store.commit = commit_with_a_push_in_the_window  # type: ignore[method-assign]
    store.begin = begin  # type: ignore[method-assign]

    def drain() -> None:
        while (cid := wakeups.get()) is not None:
            service.drain(cid)

    drainers = [threading.Thread(target=drain) for _ in range(8)]
    for t in drainers:
        t.start()
    cids = [f"c{k}" for k in range(1000)]
    for cid in cids:
        client.send_event(cid, "first", message_id=f"{cid}-1")
    # Wait until every conversation had its race, then stop the drainers.
    deadline = threading.Event()
    for _ in range(600):
        with lock:
            if len(pushed) == len(cids) and wakeups.empty():
                break
        deadline.wait(0.05)
    for _ in drainers:
        wakeups.put(None)
    for t in drainers:
        t.join()
    stranded = [cid for cid in cids if store.inbox_depth(cid)]
    assert busy[0] > len(cids) // 2, f"the race was not exercised ({busy[0]} turned-away wake-ups)"
    assert stranded == [], f"{len(stranded)} conversations stranded"
    for cid in cids[:50]:
        trace = [msgpack.unpackb(t, raw=False)["id"] for t in store.trace(cid, 10)]
        assert trace == [f"{cid}-1", f"{cid}-2"]
