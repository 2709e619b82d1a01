"""The HTTP API's accept on the event loop (worker/client/async_client.py, worker/store/async_mailbox.py,
worker/store/async_scripts.py), against a real Redis of the test's own: it writes exactly what the blocking client
writes, answers 202/duplicate, 429 and 503 as before, takes no thread hop for a small body, and its one pipelined
connection survives cancelled callers, a lost connection, a forgotten script and a Redis restart."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from tests.support.redis_server import RedisServer, redis_of_its_own
from worker.client import ConversationClient
from worker.client.async_client import AsyncClient
from worker.envelopes.inputs import decode_envelope
from worker.errors import InboxFullError, StoreUnavailableError
from worker.ingress import api as api_module
from worker.ingress.app import create_app
from worker.store.async_scripts import AsyncScript, AsyncWire, WireSettings
from worker.store.entry_codec import split_entry
from worker.store.limits import StoreLimits
from worker.store.redis_store import ConversationStore
from worker.store.replication import Replication

PRODUCER = {"Authorization": "Bearer game-token"}
CID = "447700900123"

server = pytest.fixture(redis_of_its_own)


def _client(r: redis.Redis, prefix: str, woken: list[str] | None = None, **limits: Any) -> ConversationClient:
    store = ConversationStore(r, prefix=prefix, limits=StoreLimits(**limits))
    return ConversationClient(store, wake=(woken if woken is not None else []).append, max_text_chars=100)


def _http(client: ConversationClient) -> TestClient:
    return TestClient(create_app(client, client.store, app_secret="s", verify_token="v", api_tokens="game-token"))


def _dump(r: redis.Redis, prefix: str) -> dict[str, Any]:
    """Every key under ``prefix`` (renamed to a common prefix) and what it holds, times left out."""
    out: dict[str, Any] = {}
    for key in r.scan_iter(match=f"{prefix}*"):
        kind, name = r.type(key), key.decode().replace(prefix, "P", 1)
        if kind == b"list":
            out[name] = [(i, decode_envelope(e).model_dump(exclude={"accepted_at"}))
                         for i, e in (split_entry(entry) for entry in r.lrange(key, 0, -1))]
        elif kind == b"zset":
            out[name] = sorted(m.decode().replace(prefix, "P") for m in r.zrange(key, 0, -1))
        elif kind == b"set":
            out[name] = sorted(r.smembers(key))
        else:
            out[name] = kind  # a time (the inbound mark, the dedupe stamps): its presence is compared
    return out


def test_a_real_redis_accepts_on_the_loop_and_fakeredis_in_a_thread(server: RedisServer) -> None:
    import fakeredis

    assert AsyncClient.for_client(_client(server.client(), "a")) is not None
    assert AsyncClient.for_client(_client(fakeredis.FakeRedis(), "a")) is None
    tls = redis.Redis(port=server.port, ssl=True)
    assert WireSettings.of(tls) is None


def test_the_loop_writes_what_the_blocking_client_writes(server: RedisServer) -> None:
    r = server.client()
    woken_loop: list[str] = []
    looped, blocking = _client(r, "loop", woken_loop), _client(r, "sync")
    http = _http(looped)
    calls = [("messages", "send_message", {"text": "Where next?", "message_id": "m1", "reply_to": "wamid.X"}),
             ("events", "send_event", {"text": "Tagged the theatre", "message_id": "e1", "pinned": True}),
             ("messages", "send_message", {"text": "Where next?", "message_id": "m1"}),  # a duplicate
             ("reset", "reset", {"message_id": "r1"})]
    for path, method, body in calls:
        done = getattr(blocking, method)(CID, **body)
        answer = http.post(f"/v1/conversations/{CID}/{path}", headers=PRODUCER, json=body)
        assert answer.status_code == 202
        assert answer.json() == {"input_id": done.message_id, "duplicate": done.duplicate}
    assert _dump(r, "loop") == _dump(r, "sync") != {}
    assert r.exists(looped.store.keys(CID).inbound)  # the player's message opened the window
    assert woken_loop == [CID]  # the first input of the burst woke a worker, the others did not


def test_on_the_stores_own_redis_the_loops_accept_pushes_the_wake_up_itself(server: RedisServer) -> None:
    """Issue 33: the accept script pushes the workers' wake-up (the first input waiting only); no kombu publish, no
    thread hop."""
    from worker.queue.wakeup import QUEUE, accept_wake
    from worker.settings import Settings

    r = server.client()
    wake = accept_wake(Settings(_env_file=None, redis_url=f"redis://127.0.0.1:{server.port}/0"))  # type: ignore[call-arg]
    assert wake is not None
    published: list[str] = []
    store = ConversationStore(r, prefix="pushed", limits=StoreLimits())
    client = ConversationClient(store, wake=published.append, accept_wake=wake)
    on_loop = AsyncClient.for_client(client)
    assert on_loop is not None

    async def scenario() -> None:
        for i in range(3):
            await on_loop.send("message", CID, {"text": f"hi {i}", "message_id": f"m{i}"})
        await on_loop.send("event", "447700900124", {"text": "tagged", "message_id": "e1"})

    asyncio.run(scenario())
    assert published == []
    woken = [json.loads(m)["headers"]["argsrepr"] for m in reversed(r.lrange(QUEUE, 0, -1))]
    assert woken == [f"['{CID}']", "['447700900124']"]


def test_the_loop_and_the_blocking_client_wake_through_the_clients_public_seam(server: RedisServer) -> None:
    """Both paths ask the client for the accept's own wake-up (``accept_wake_push``) and publish through it
    (``publish_wake``): a client that changes either changes both paths, none reaches past them."""
    seam: list[tuple[str, str]] = []

    class Recording(ConversationClient):
        def accept_wake_push(self, conversation_id: str) -> None:  # type: ignore[override]
            seam.append(("push", conversation_id))

        def publish_wake(self, conversation_id: str) -> None:
            seam.append(("publish", conversation_id))

    store = ConversationStore(server.client(), prefix="seam", limits=StoreLimits())
    client = Recording(store, wake=lambda cid: pytest.fail("the waker is called only through publish_wake"))
    on_loop = AsyncClient.for_client(client)
    assert on_loop is not None
    asyncio.run(on_loop.send("message", CID, {"text": "hi", "message_id": "m1"}))
    client.send_message("447700900124", "hi", message_id="m2")
    assert seam == [("push", CID), ("publish", CID), ("push", "447700900124"), ("publish", "447700900124")]


def test_a_small_body_takes_no_thread_hop_a_large_one_and_a_reset_do(
        server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    hops: list[object] = []

    async def counted(fn: Any, *args: Any) -> Any:
        hops.append(fn)
        return fn(*args)

    monkeypatch.setattr(api_module, "run_in_threadpool", counted)
    http = _http(_client(server.client(), "hop", max_inbox=10))
    assert http.post(f"/v1/conversations/{CID}/events", headers=PRODUCER, json={"text": "small"}).status_code == 202
    assert hops == []
    padded = '{"text": "large",' + " " * api_module.SMALL_BODY_BYTES + '"message_id": "big"}'  # JSON whitespace
    r = http.post(f"/v1/conversations/{CID}/events", headers={**PRODUCER, "Content-Type": "application/json"},
                  content=padded)
    assert r.status_code == 202 and len(hops) == 1
    # A reset is not a plain accept (the client's reset does more): the blocking client, in a thread.
    assert http.post(f"/v1/conversations/{CID}/reset", headers=PRODUCER).status_code == 202
    assert len(hops) == 2


def test_a_full_mailbox_is_429_and_the_retry_is_safe_once_drained(server: RedisServer) -> None:
    r = server.client()
    client = _client(r, "full", max_inbox=1)
    http = _http(client)
    assert http.post(f"/v1/conversations/{CID}/events", headers=PRODUCER,
                     json={"text": "one", "message_id": "e1"}).status_code == 202
    full = http.post(f"/v1/conversations/{CID}/events", headers=PRODUCER, json={"text": "two", "message_id": "e2"})
    assert full.status_code == 429 and int(full.headers["retry-after"]) > 0
    assert [i for i, _ in client.store.inbox(CID)] == ["e1"]
    r.delete(client.store.keys(CID).inbox)  # a worker drained the mailbox
    again = http.post(f"/v1/conversations/{CID}/events", headers=PRODUCER, json={"text": "two", "message_id": "e2"})
    assert (again.status_code, again.json()["duplicate"]) == (202, False)


def test_redis_down_is_503_and_back_up_is_202(server: RedisServer) -> None:
    client = _client(redis.Redis(port=server.port, socket_connect_timeout=0.2, socket_timeout=1), "down")
    on_loop = AsyncClient.for_client(client)
    assert on_loop is not None

    async def scenario() -> None:  # one loop throughout, so the same wire sees the outage and the return
        await on_loop.send("event", CID, {"text": "before", "message_id": "e0"})
        server.stop(kill=True)
        with pytest.raises(StoreUnavailableError):
            await on_loop.send("event", CID, {"text": "during", "message_id": "e1"})
        server.start()
        done = await on_loop.send("event", CID, {"text": "during", "message_id": "e1"})
        assert not done.duplicate

    asyncio.run(scenario())
    http = _http(_client(redis.Redis(port=server.port + 1 if server.port < 65535 else 1,
                                     socket_connect_timeout=0.2), "down"))
    r = http.post(f"/v1/conversations/{CID}/messages", headers=PRODUCER, json={"text": "hi", "message_id": "m"})
    assert r.status_code == 503 and int(r.headers["retry-after"]) > 0


def test_a_replica_short_of_the_wait_is_a_503(server: RedisServer) -> None:
    """With PARLEY_REDIS_WAIT_REPLICAS=1 and no replica, WAIT comes back short: the outcome is unknown, as in the
    blocking store, and the connection stays in step for the next request."""
    client = _client(server.client(), "wait", wait_replicas=1, wait_timeout_ms=20)
    http = _http(client)
    for _ in range(2):
        r = http.post(f"/v1/conversations/{CID}/events", headers=PRODUCER, json={"text": "x", "message_id": "w"})
        assert r.status_code == 503 and int(r.headers["retry-after"]) > 0


@pytest.fixture
def wire(server: RedisServer) -> Iterator[AsyncWire]:
    settings = WireSettings.of(redis.Redis(port=server.port, socket_timeout=2))
    assert settings is not None
    yield AsyncWire(settings)


def test_cancelled_callers_never_shift_the_replies_of_the_others(wire: AsyncWire, server: RedisServer) -> None:
    echo = AsyncScript(wire, "return ARGV[1]", Replication())

    async def scenario() -> None:
        assert await echo([], ["loaded"], what="echo") == b"loaded"
        server.client().client_pause(300)  # every reply is still to come when the callers are cancelled
        tasks = [asyncio.create_task(echo([], [f"a{i}"], what="echo")) for i in range(200)]
        await asyncio.sleep(0.05)
        assert not any(task.done() for task in tasks)
        for task in tasks[::3]:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for i, got in enumerate(results):
            assert isinstance(got, asyncio.CancelledError) if i % 3 == 0 else got == f"a{i}".encode()
        assert await echo([], ["after"], what="echo") == b"after"

    asyncio.run(scenario())


def test_a_forgotten_script_and_a_killed_connection_are_recovered(wire: AsyncWire, server: RedisServer) -> None:
    echo = AsyncScript(wire, "return ARGV[1]", Replication())

    async def scenario() -> None:
        assert await echo([], ["one"], what="echo") == b"one"
        server.client().script_flush()
        assert await echo([], ["two"], what="echo") == b"two"
        server.client().client_kill_filter(_type="normal", skipme=True)
        assert await echo([], ["three"], what="echo") == b"three"

    asyncio.run(scenario())


def test_a_full_mailbox_raises_as_the_blocking_store_does(server: RedisServer) -> None:
    client = _client(server.client(), "raise", max_inbox=1)
    on_loop = AsyncClient.for_client(client)
    assert on_loop is not None

    async def scenario() -> None:
        await on_loop.send("event", CID, {"text": "one"})
        with pytest.raises(InboxFullError):
            await on_loop.send("event", CID, {"text": "two"})

    asyncio.run(scenario())
