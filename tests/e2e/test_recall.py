"""End to end with recall: a real Celery worker (defaults: ``PARLEY_RECALL`` unset, so the tool with an
OpenAI-compatible provider) whose loopback model calls ``search_conversation``; the archive in Redis as the commits
write it (codec batches and index segments), and the answer carries the archived fact with its time."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from tests.e2e.conftest import Cluster
from tests.support.workers import wait_until
from worker.conversation.recall import ArchivedMessage, SearchIndex, encode_batch, stable_id

pytestmark = pytest.mark.e2e

CID = "447700123456"


def test_the_model_searches_the_archive_through_a_worker(cluster: Cluster) -> None:
    at = datetime(2026, 10, 2, 17, 30, tzinfo=UTC)
    said = [("player", "Where did we hide the brass lantern?"), ("assistant", "Under the old bridge, by the mill."),
            ("player", "ok thanks")]
    archived = [ArchivedMessage(stable_id(CID, i, s, t), s, t, at) for i, (s, t) in enumerate(said)]  # type: ignore[arg-type]
    store = cluster.store()
    keys = store.keys(CID)
    store.client.rpush(keys.recall, encode_batch(archived))
    store.client.rpush(keys.recall_index, SearchIndex.of(archived).to_bytes())
    cluster.llm.plan_tools = lambda body: [("search_conversation", {"query": "brass lantern"})]
    cluster.start_worker("w1")
    cluster.client().send_message(CID, "where was the lantern again?", message_id="m1")
    assert wait_until(lambda: len(cluster.whatsapp.texts_for(CID)) >= 1, 60), [w.log() for w in cluster.workers]
    [reply] = cluster.whatsapp.texts_for(CID)
    assert reply.startswith("ack:where was the lantern again? | ")
    answer = json.loads(reply.split(" | ", 1)[1])
    first = answer["results"][0]
    assert (first["speaker"], first["text"], first["at"]) == ("player", said[0][1], at.isoformat())
    assert {"at": at.isoformat(), "speaker": "assistant", "text": said[1][1]} in first["context"]
    offered = [t["function"] for t in cluster.llm.requests[0]["tools"] if t["function"]["name"] == "search_conversation"]
    assert [f["parameters"] for f in offered] == [{"type": "object", "properties": {"query": {"type": "string"}},
                                                   "required": ["query"]}]
