"""`parley show` and the HTTP API's summary say how much a conversation's archive holds: its messages and bytes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import redis

from tests.support.redis_server import RedisServer, redis_of_its_own
from worker import cli
from worker.client.summary import summary
from worker.conversation.recall import ArchivedMessage, encode_batch, stable_id
from worker.store.redis_store import ConversationStore

server = pytest.fixture(redis_of_its_own)
CID = "player-1"


@pytest.fixture
def store(server: RedisServer) -> Iterator[ConversationStore]:
    client = redis.Redis(port=server.port)
    yield ConversationStore(client, prefix="t")
    client.close()


def _batch(first: int, n: int) -> bytes:
    at = datetime(2026, 5, 1, tzinfo=UTC)
    return encode_batch([ArchivedMessage(stable_id(CID, i, "player", f"message {i}"), "player", f"message {i}", at)
                         for i in range(first, first + n)])


def test_the_summary_counts_the_archives_messages_and_bytes(store: ConversationStore) -> None:
    assert summary(store, CID)["archive"] == {"messages": 0, "bytes": 0}
    batches = [_batch(0, 3), _batch(3, 4)]
    store.client.rpush(store.keys(CID).recall, *batches)  # as two archiving commits leave it
    assert summary(store, CID)["archive"] == {"messages": 7, "bytes": sum(len(b) for b in batches)}


def test_an_unreadable_archive_is_shown_as_such_not_an_error(store: ConversationStore) -> None:
    store.client.rpush(store.keys(CID).recall, _batch(0, 2)[:-3])
    assert summary(store, CID)["archive"]["messages"] is None


def test_parley_show_prints_it(store: ConversationStore, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    store.client.rpush(store.keys(CID).recall, _batch(0, 5))
    monkeypatch.setattr(cli, "_store", lambda: store)
    assert cli.main(["show", CID]) == 0
    assert json.loads(capsys.readouterr().out)["archive"]["messages"] == 5
