"""The archive's write path through the service: every message that leaves the verbatim history is in the
conversation's archive exactly once, written by the commit that lands its removal (a follow-up compaction's applied
splice, the turn's own commit after a context overflow, an idle reset's, a producer's reset); a stale splice, a
reset phrase, ``reset(forget=True)`` and a delete behave as documented."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import msgpack
import pytest

from tests.configs import bare_config
from tests.worker.conftest import Harness, make_harness
from worker import KeepLastExchanges, ScriptedModel
from worker.conversation.compaction import Summarize
from worker.conversation.model import ModelRequest
from worker.conversation.recall.codec import decode_archive
from worker.conversation.recall.index import SearchIndex
from worker.conversation.state import decode_state
from worker.errors import ContextLengthError

CID = "447700900555"


def _raw(h: Harness):  # type: ignore[no-untyped-def]
    return h.store._client


def _archive(h: Harness) -> list[str]:
    return [m.text for m in decode_archive(b"".join(_raw(h).lrange(h.store.keys(CID).recall, 0, -1)))]


def _history(h: Harness) -> list[str]:
    blob = h.store.read_state(CID).blob
    return [] if not blob else [m.content for m in decode_state(blob).messages]


def _talk(h: Harness, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        h.client.send_message(CID, f"q{i}", message_id=f"m{i}")
        h.run(defer=("compact",))


def _echo(req: ModelRequest) -> str:
    return "ack:" + req.messages[-1].content


def _everything_said(h: Harness, upto: int) -> Counter[str]:
    return Counter([f"q{i}" for i in range(upto)] + [f"ack:q{i}" for i in range(upto)])


def test_a_follow_up_compaction_archives_what_its_splice_dropped_once_and_a_stale_one_nothing() -> None:
    h = make_harness(ScriptedModel(default=_echo), compactor=Summarize(ScriptedModel(default="sum"), keep_last=2,
                                                                       batch=2))
    _talk(h, 6)
    assert h.service.queue_compaction(CID)
    h.store.clear_compacting(CID)
    assert h.service.queue_compaction(CID)  # computed on the same base: its splice comes second, stale
    h.run()
    trace = [msgpack.unpackb(t) for t in h.store.trace(CID, 100)]
    assert [t["splice"] for t in trace if "splice" in t] == [True, False]
    archived = _archive(h)
    # Every message is either still in the history or archived, and none twice.
    assert archived and Counter(archived) + Counter(_history(h)) == _everything_said(h, 6)
    assert "archived" not in [t for t in trace if "splice" in t][1]
    segments = _raw(h).lrange(h.store.keys(CID).recall_index, 0, -1)
    assert len(segments) == len(_raw(h).lrange(h.store.keys(CID).recall, 0, -1)) == 1
    assert SearchIndex.from_bytes(segments[0]).rank("q1", 3)


def test_a_context_overflow_compaction_is_archived_by_the_turn_s_commit() -> None:
    model = ScriptedModel(default=_echo)
    h = make_harness(model, compactor=KeepLastExchanges(2))
    _talk(h, 6)
    assert _archive(h) == []
    model.push(ContextLengthError("maximum context length exceeded", provider="openai", status=400))
    h.client.send_message(CID, "long one", message_id="long")
    h.run(defer=("compact",))
    said = _everything_said(h, 6) + Counter(["long one", "ack:long one"])
    assert Counter(_archive(h)) + Counter(_history(h)) == said
    trace = [msgpack.unpackb(t) for t in h.store.trace(CID, 100)]
    assert trace[-1]["archived"] == len(_archive(h)) and trace[-1]["archived_bytes"] > 0


def test_an_idle_reset_archives_the_history_it_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1_800_000_000.0]
    h = make_harness(ScriptedModel(default=_echo), idle_gap_seconds=60, clock=lambda: now[0])
    _talk(h, 2)
    now[0] += 3600
    h.client.send_message(CID, "back", message_id="back")
    h.run()
    assert _archive(h) == ["q0", "ack:q0", "q1", "ack:q1"] and _history(h) == ["back", "ack:back"]


def test_a_producer_reset_closes_the_history_into_the_archive_and_forget_erases_it() -> None:
    h = make_harness(ScriptedModel(default=_echo))
    _talk(h, 2)
    h.client.reset(CID)
    h.run()
    assert _archive(h) == ["q0", "ack:q0", "q1", "ack:q1"]
    _talk(h, 1, start=2)
    h.client.reset(CID, forget=True)
    h.run()
    assert _archive(h) == [] and not _raw(h).exists(h.store.keys(CID).recall_index)


def test_the_player_s_reset_phrase_erases_the_archive_and_a_delete_too() -> None:
    h = make_harness(ScriptedModel(default=_echo), reset_phrases=("start over",))
    _talk(h, 2)
    h.client.reset(CID)
    h.run()
    assert _archive(h)
    h.client.send_message(CID, "start over", message_id="so")
    h.run()
    assert _archive(h) == []
    _talk(h, 1, start=5)
    h.client.reset(CID)
    h.run()
    assert _archive(h)
    h.client.delete(CID)
    assert _archive(h) == []


def test_recall_off_writes_no_archive() -> None:
    config = replace(bare_config(system_prompt="You are a test."), archive_on=False)
    h = make_harness(ScriptedModel(default=_echo), config=config)
    _talk(h, 2)
    h.client.reset(CID)
    h.run()
    assert _archive(h) == []


@pytest.mark.parametrize(("recall", "archives"), [("off", False), ("tool", True), ("auto", True), ("both", True),
                                                  (None, True)])
def test_parley_recall_decides_whether_commits_archive(recall: str | None, archives: bool,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from worker.runtime import service_config
    from worker.settings import Settings

    monkeypatch.delenv("PARLEY_RECALL", raising=False)
    if recall is not None:
        monkeypatch.setenv("PARLEY_RECALL", recall)
    assert service_config(Settings(_env_file=None)).archive_on is archives
