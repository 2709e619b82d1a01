"""The archive's reader over Redis: the agreed layout (``recall``: codec batches, ``recall_index``: index segments,
one each per commit that archived something), seeded as the commits write it, searched through a real redis-server."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis

from tests.support.redis_server import RedisServer, redis_of_its_own
from worker import ScriptedModel
from worker.conversation.recall import ArchivedMessage, SearchIndex, encode_batch, stable_id
from worker.conversation.recall.reading import Recall
from worker.store.recall_reader import RedisArchiveReader
from worker.store.redis_store import ConversationStore

server = pytest.fixture(redis_of_its_own)
WORDS = [f"{a}{b}" for a in ("ka", "lo", "mi", "ru", "te", "vo") for b in ("ber", "dan", "fel", "gor")]
CID = "player-1"


@pytest.fixture
def store(server: RedisServer) -> Iterator[ConversationStore]:
    client = redis.Redis(port=server.port)
    yield ConversationStore(client, prefix="t")
    client.close()


def _conversation(n: int, seed: int = 3) -> list[ArchivedMessage]:
    rng = random.Random(seed)
    start = datetime(2026, 5, 1, tzinfo=UTC)
    out = []
    for i in range(n):
        speaker = "player" if i % 2 == 0 else "assistant"
        text = " ".join(rng.choices(WORDS, k=10))
        out.append(ArchivedMessage(stable_id(CID, i, speaker, text), speaker, text, start + timedelta(minutes=i)))
    return out


def _plant(messages: list[ArchivedMessage], at: int, question: str, answer: str) -> None:
    for offset, (speaker, text) in enumerate((("player", question), ("assistant", answer))):
        old = messages[at + offset]
        messages[at + offset] = ArchivedMessage(stable_id(CID, at + offset, speaker, text), speaker, text,  # type: ignore[arg-type]
                                                old.at)


def _commit(store: ConversationStore, batch: list[ArchivedMessage]) -> None:
    """What a commit that archived ``batch`` leaves: one codec batch and one index segment."""
    keys = store.keys(CID)
    store.client.rpush(keys.recall, encode_batch(batch))
    store.client.rpush(keys.recall_index, SearchIndex.of(batch).to_bytes())


def test_the_reader_finds_what_the_commits_wrote_with_context_across_segments(store: ConversationStore) -> None:
    messages = _conversation(60)
    _plant(messages, 29, "What is the gate's password?", "The password is marigold.")  # the answer starts segment 3
    for first in range(0, 60, 15):
        _commit(store, messages[first:first + 15])
    reader = RedisArchiveReader(store.client, store.keys)
    results = reader.search(CID, "gate password", max_tokens=400)
    assert results[0]["text"] == "What is the gate's password?"
    assert results[0]["at"] == messages[29].at.isoformat()  # type: ignore[union-attr]
    assert {"at": messages[30].at.isoformat(), "speaker": "assistant",  # type: ignore[union-attr]
            "text": "The password is marigold."} in results[0]["context"]
    assert reader.search("someone-else", "gate password", max_tokens=400) == []


def test_merged_hits_are_ranked_by_score_across_segments(store: ConversationStore) -> None:
    messages = _conversation(40)
    _plant(messages, 4, "a lantern", "ok")
    _plant(messages, 32, "the lantern lantern lantern by the brass lantern", "ok")
    _commit(store, messages[:20])
    _commit(store, messages[20:])
    results = RedisArchiveReader(store.client, store.keys).search(CID, "brass lantern", max_tokens=400)
    assert [r["text"] for r in results[:2]] == [messages[32].text, messages[4].text]


def test_a_warm_search_decodes_only_the_new_segments(store: ConversationStore,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    messages = _conversation(40)
    _plant(messages, 36, "Where is the silver key?", "In the well.")
    reader = RedisArchiveReader(store.client, store.keys)
    decoded: list[bytes] = []
    original = SearchIndex.from_bytes.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(SearchIndex, "from_bytes",
                        classmethod(lambda cls, data: decoded.append(data) or original(cls, data)))
    for first in range(0, 30, 10):
        _commit(store, messages[first:first + 10])
    assert reader.search(CID, "silver key", max_tokens=300) == []
    assert len(decoded) == 3
    _commit(store, messages[30:])
    assert reader.search(CID, "silver key", max_tokens=300)[0]["text"] == "Where is the silver key?"
    assert len(decoded) == 4  # the three known segments were not decoded again
    # A merge off the turn replaced the segments by one: the list is read again whole.
    keys = store.keys(CID)
    store.client.delete(keys.recall_index)
    store.client.rpush(keys.recall_index, SearchIndex.of(messages).to_bytes())
    assert reader.search(CID, "silver key", max_tokens=300)[0]["text"] == "Where is the silver key?"
    assert len(decoded) == 5
    # The commit erases the keys (a reset phrase, a forget, a delete); the reader's erase only forgets its cache, and
    # its append writes nothing: a write outside the fenced commit could land for a commit that was fenced out.
    assert reader.append(CID, messages) == [] and store.client.llen(keys.recall_index) == 1
    store.client.delete(keys.recall, keys.recall_index)
    reader.erase(CID)
    assert reader.search(CID, "silver key", max_tokens=300) == []


def test_the_worker_wires_the_configured_mode(store: ConversationStore) -> None:
    from worker.runtime import build_archive
    from worker.settings import Settings

    assert build_archive(Settings(_env_file=None, recall="off"), store, ScriptedModel(provider="openai")) is None
    local = build_archive(Settings(_env_file=None), store, ScriptedModel(provider="local"))
    assert isinstance(local, Recall) and local.mode == "auto" and isinstance(local.archive, RedisArchiveReader)
    hosted = build_archive(Settings(_env_file=None, recall_max_tokens=300), store, ScriptedModel(provider="openai"))
    assert isinstance(hosted, Recall) and hosted.mode == "tool" and hosted.max_tokens == 300


def test_a_damaged_segment_leaves_the_turn_without_recall(store: ConversationStore) -> None:
    from worker import Chat
    from worker.conversation import Reply, turn_context

    messages = _conversation(20)
    _commit(store, messages)
    store.client.rpush(store.keys(CID).recall_index, b"PRI1 not an index")
    reader = RedisArchiveReader(store.client, store.keys)
    model = ScriptedModel(["fine", Reply(tool_calls=(("search_conversation", {"query": "kaber"}),)), "still fine"])
    with turn_context(CID, "in-1"):
        assert Chat(model=model, archive=Recall(reader, "auto")).run_turn(None, user="kaber").reply == "fine"
        assert Chat(model=model, archive=Recall(reader, "tool")).run_turn(None, user="kaber").reply == "still fine"
    assert model.requests[0].recalled is None
    result = model.requests[2].messages[-1]
    assert result.is_error and "ArchiveDecodeError" in result.content
