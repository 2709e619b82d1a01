"""The inlet's dead letters: a replay puts a letter back on the stream, never one of a conversation deleted after it
(its tombstone); RabbitMQ's ``<queue>.dead`` is bounded, and a deployment whose dead queue predates the bounds keeps
working with it."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator

import pytest
from kombu.connection import Connection

from tests.inlet.test_amqp import QUEUE, _dead, _publish
from tests.inlet.test_inlet import STREAM, Rig
from tests.support.rabbitmq import Vhost, rabbitmq_vhost
from tests.support.redis_server import RedisServer, redis_of_its_own
from worker.client import ConversationClient
from worker.errors import ReplayRefusedError
from worker.inlet.amqp import AmqpInlet
from worker.inlet.dead_letters import dead_letters, replay
from worker.store.redis_store import ConversationStore

server = pytest.fixture(redis_of_its_own)


def _too_long(rig: Rig, cid: str) -> None:
    rig.publish(kind="message", conversation_id=cid, text="x" * 20_000, message_id=f"{cid}-long")


def test_a_dead_letter_is_replayed_onto_the_stream(server: RedisServer) -> None:
    rig = Rig(server)
    _too_long(rig, "c1")
    rig.inlet("a").step()
    [letter] = dead_letters(rig.r, STREAM)
    assert letter.conversation_id == "c1" and letter.reason.startswith("text")
    new_id = replay(rig.r, STREAM, letter.id, rig.store)
    assert dead_letters(rig.r, STREAM) == []
    [(eid, fields)] = rig.r.xrange(STREAM)  # type: ignore[misc]
    assert eid.decode() == new_id and fields[b"envelope"] == letter.envelope


def test_a_dead_letter_of_a_deleted_conversation_is_never_replayed(server: RedisServer) -> None:
    rig = Rig(server)
    rig.publish(kind="message", conversation_id="c1", text="hello", message_id="m1")
    _too_long(rig, "c1")
    rig.inlet("a").step()
    rig.client.delete("c1")  # the player asked to be forgotten
    [letter] = dead_letters(rig.r, STREAM)
    with pytest.raises(ReplayRefusedError, match="deleted"):
        replay(rig.r, STREAM, letter.id, rig.store)
    assert [d.id for d in dead_letters(rig.r, STREAM)] == [letter.id] and rig.r.xlen(STREAM) == 0
    with pytest.raises(ReplayRefusedError, match="no dead letter"):
        replay(rig.r, STREAM, "1-1", rig.store)


@pytest.fixture
def vhost() -> Iterator[Vhost]:
    v = rabbitmq_vhost()
    yield v
    v.delete()


def _run_until_drained(vhost: Vhost, client: ConversationClient, **bounds: float) -> None:
    stop = False
    inlet = AmqpInlet(vhost.url, client, QUEUE, retry_seconds=0.05, **bounds)  # type: ignore[arg-type]
    thread = threading.Thread(target=inlet.run, args=(lambda: stop,))
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with Connection(vhost.url) as conn:  # type: ignore[no-untyped-call]
                left = conn.channel().queue_declare(QUEUE, passive=True)  # type: ignore[no-untyped-call]
            if left.message_count == 0 and left.consumer_count:
                break
            time.sleep(0.1)
        time.sleep(0.5)
        assert thread.is_alive()
    finally:
        stop = True
        thread.join(10)


def test_the_amqp_dead_queue_keeps_at_most_its_number(vhost: Vhost, server: RedisServer) -> None:
    client = ConversationClient(ConversationStore(server.client(), prefix="q"), wake=lambda cid: None)
    _publish(vhost.url, *(f"{{not json {i}" for i in range(4)))
    _run_until_drained(vhost, client, dead_max=2)
    assert [body for body, _ in _dead(vhost.url)] == [b"{not json 2", b"{not json 3"]


def test_a_dead_queue_declared_before_its_bounds_is_kept_and_used(vhost: Vhost, server: RedisServer,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="parley.inlet")
    with Connection(vhost.url) as conn:  # type: ignore[no-untyped-call]
        conn.channel().queue_declare(f"{QUEUE}.dead", durable=True, auto_delete=False,  # type: ignore[no-untyped-call]
                                     arguments={"x-queue-type": "quorum"})  # as an older release declared it
    client = ConversationClient(ConversationStore(server.client(), prefix="q"), wake=lambda cid: None)
    _publish(vhost.url, "{not json", json.dumps({"kind": "event", "conversation_id": "c1", "text": "ok",
                                                 "message_id": "e1"}))
    _run_until_drained(vhost, client, dead_max=2)
    assert [body for body, _ in _dead(vhost.url)] == [b"{not json"]
    assert [m for m, _ in client.store.inbox("c1")] == ["e1"]
    assert any("exists without the bounds" in r.getMessage() for r in caplog.records)


def test_parley_inlet_lists_the_dead_letters_and_refuses_a_deleted_conversations_replay(
        server: RedisServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        request: pytest.FixtureRequest) -> None:
    from worker.cli import main
    from worker.settings import get_settings

    monkeypatch.setenv("REDIS_URL", server.url)
    monkeypatch.setenv("PARLEY_KEY_PREFIX", "t")  # the rig's store
    get_settings.cache_clear()  # read once per process: this test's environment, then whatever comes next's
    request.addfinalizer(get_settings.cache_clear)
    rig = Rig(server)
    rig.publish(kind="message", conversation_id="c1", text="hello", message_id="m1")
    _too_long(rig, "c1")
    _too_long(rig, "c2")
    rig.inlet("a").step()
    rig.client.delete("c1")
    c1, c2 = dead_letters(rig.r, STREAM)
    assert main(["inlet", "--dead"]) == 0
    listed = capsys.readouterr().out
    assert f"{c1.id} (entry {c1.entry_id}, c1): text" in listed and f"{c2.id} (entry {c2.entry_id}, c2)" in listed
    assert main(["inlet", "--replay", c1.id]) == 2
    assert "c1 was deleted after it" in capsys.readouterr().err
    assert main(["inlet", "--replay", c2.id]) == 0
    assert [d.id for d in dead_letters(rig.r, STREAM)] == [c1.id] and rig.r.xlen(STREAM) == 1
