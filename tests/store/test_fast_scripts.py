"""Scripts sent on a pooled connection (worker/store/fast_scripts.py), against a real redis-server of their own: the
server forgets scripts, drops connections and goes away, and the store must behave as it did through redis-py's
``Script`` — the same answers, the same errors, no connection kept out of the pool."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import fakeredis
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.support.redis_server import RedisServer, start_redis
from worker.errors import StoreError, StoreUnavailableError
from worker.store.fast_scripts import FastScript, register
from worker.store.redis_store import ConversationStore


@pytest.fixture()
def server() -> Iterator[RedisServer]:
    s = start_redis()
    try:
        yield s
    finally:
        s.stop()


def _store(server: RedisServer, retries: int = 0) -> ConversationStore:
    # One connection in the pool: a call that kept its connection would make the next one wait, then fail.
    # No retries unless asked, as the pool worker.runtime builds.
    pool = redis.BlockingConnectionPool.from_url(server.url, max_connections=1, timeout=2,
                                                 retry=Retry(NoBackoff(), retries))
    return ConversationStore(redis.Redis(connection_pool=pool), prefix=f"t{uuid.uuid4().hex[:6]}")


def _turn(store: ConversationStore, cid: str, n: int) -> int:
    assert store.accept(cid, b"payload", f"m{n}").accepted
    b = store.begin(cid, 5_000)
    assert b.status == "ok" and b.snapshot is not None
    res = store.commit(cid, b.token, expected_version=b.snapshot.version, input_id=f"m{n}",
                       new_state=f"state {n}".encode(), reply=f"reply {n}".encode())
    return res.version


def test_a_plain_client_gets_fast_scripts_and_others_keep_redis_py() -> None:
    assert isinstance(register(redis.Redis(), "return 1"), FastScript)
    assert not isinstance(register(fakeredis.FakeRedis(), "return 1"), FastScript)
    single = redis.Redis(single_connection_client=True)
    try:
        assert not isinstance(register(single, "return 1"), FastScript)
    finally:
        single.close()


def test_turns_on_a_one_connection_pool_give_every_connection_back(server: RedisServer) -> None:
    store = _store(server)
    versions = [_turn(store, "447700900001", n) for n in range(1, 30)]
    assert versions == list(range(1, 30))
    assert store.read_state("447700900001").blob == b"state 29"


def test_a_server_that_forgot_the_scripts_is_taught_them_again(server: RedisServer) -> None:
    store = _store(server)
    _turn(store, "447700900002", 1)
    server.client().script_flush()
    assert _turn(store, "447700900002", 2) == 2
    commit_sha = store._scripts._commit.sha
    assert server.client().script_exists(commit_sha) == [True]  # loaded again by the call that found it missing


def test_a_dropped_connection_is_retried_like_redis_py_does(server: RedisServer) -> None:
    store = _store(server)
    _turn(store, "447700900003", 1)
    admin = server.client()
    killed = admin.client_kill_filter(_type="normal", skipme=True)
    assert killed >= 1
    assert _turn(store, "447700900003", 2) == 2  # the pooled connection was dead; the retry reconnected


def _lose_next_send(store: ConversationStore) -> list[object]:
    """The pooled connection's next command fails as if the server had reset it; returns what it was."""
    pool = store._client.connection_pool
    conn = pool.get_connection()
    real_send, lost = conn.send_packed_command, []

    def send_once_lost(command: list[bytes], check_health: bool = True) -> None:
        if not lost:
            lost.append(b"".join(command).split(b"\r\n")[2])  # the command's name
            raise redis.ConnectionError("connection reset by peer")
        real_send(command, check_health)

    conn.send_packed_command = send_once_lost  # type: ignore[method-assign]
    pool.release(conn)
    return lost


@pytest.mark.parametrize("retries", [0, 2])
def test_a_connection_lost_mid_call_follows_the_clients_retry(server: RedisServer, retries: int) -> None:
    store = _store(server, retries)
    _turn(store, "447700900007", 1)
    lost = _lose_next_send(store)
    if retries:
        assert _turn(store, "447700900007", 2) == 2  # sent again on a new connection
    else:
        with pytest.raises(StoreUnavailableError):
            store.accept("447700900007", b"payload", "m2")
        assert _turn(store, "447700900007", 2) == 2  # and the pool's next connection works
    assert lost == [b"EVALSHA"]


def test_a_server_gone_is_an_outage_and_keeps_the_pool_usable(server: RedisServer) -> None:
    store = _store(server)
    _turn(store, "447700900004", 1)
    port = server.port
    server.stop(kill=True)
    with pytest.raises(StoreUnavailableError):
        store.accept("447700900004", b"payload", "m2")
    server.port = port
    server.start()  # same port, empty: the conversation starts over, the client reconnects
    assert _turn(store, "447700900004", 1) == 1


def test_a_refused_script_is_a_store_error_and_the_connection_goes_back(server: RedisServer) -> None:
    client = redis.Redis(connection_pool=redis.BlockingConnectionPool.from_url(server.url, max_connections=1,
                                                                                timeout=1))
    failing = FastScript(client, "return redis.call('INCR', KEYS[1])")
    client.set("text", "not a number")
    for _ in range(3):  # each refusal must give its connection back, or the second would wait and time out
        with pytest.raises(redis.ResponseError):
            failing(keys=["text"])
    assert failing(keys=["counter"]) == 1
    store = _store(server)
    server.client().set(store.keys("447700900005").inbox, "not a list")
    with pytest.raises(StoreError) as refused:  # WRONGTYPE inside the script: the store's own error, not an outage
        store.accept("447700900005", b"x", "m1")
    assert not isinstance(refused.value, StoreUnavailableError)
    assert _turn(store, "447700900006", 1) == 1
