"""A turn's trace entry references the turn's texts in the state rather than repeating them (issue 33: the repeated
texts took more of Redis than the history), and leaves out the fields at their usual value; ``parley trace`` and
``parley show`` put both back, so they read as before, and say so when the state no longer holds the texts."""

from __future__ import annotations

import msgpack

from tests.worker.conftest import make_harness
from worker import ScriptedModel
from worker.client.summary import GONE, TURN_USUAL, summary, with_texts
from worker.conversation.compaction import Summarize

CID = "447700900456"


def test_the_entry_holds_no_text_and_the_readers_put_the_texts_back() -> None:
    h = make_harness()
    for i in range(3):
        h.client.send_message(CID, f"question {i}", message_id=f"m{i}")
    h.run()
    stored = [msgpack.unpackb(t) for t in h.store.trace(CID)]
    assert all("user" not in t and "reply" not in t and "in_state" in t for t in stored)
    assert all(not any(k in t for k in ("finish", "model_calls", "tool_calls", "parts", "reset")) for t in stored)
    assert sum(map(len, h.store.trace(CID))) < 3 * 120  # the ids, times and usage: no texts
    shown = with_texts(stored, h.store.read_state(CID).blob)
    assert [(t["user"], t["reply"]) for t in shown] == [(f"question {i}", f"ack:question {i}") for i in range(3)]
    assert all(t[k] == v for t in shown for k, v in TURN_USUAL.items())  # as an entry read before issue 33
    assert [r["reply"] for r in summary(h.store, CID)["last_replies"]] == [f"ack:question {i}" for i in range(3)]


def test_a_turn_compacted_away_keeps_its_counts_and_says_its_texts_are_gone() -> None:
    h = make_harness(compactor=Summarize(ScriptedModel(default="the summary"), keep_last=1, batch=2))
    for i in range(4):
        h.client.send_message(CID, f"q{i}", message_id=f"m{i}")
    h.run(defer=("compact",))
    assert h.service.queue_compaction(CID)
    h.run()
    shown = [t for t in with_texts([msgpack.unpackb(t) for t in h.store.trace(CID, 100)],
                                   h.store.read_state(CID).blob) if "in_state" in t]
    assert shown[0]["texts"] == GONE and "reply" not in shown[0] and shown[0]["prompt_tokens"] is not None
    assert shown[-1]["user"] == "q3" and shown[-1]["reply"] == "ack:q3"


def test_entries_written_before_issue_33_read_as_they_were() -> None:
    old = {"at": 1.0, "id": "m1", "kind": "message", "user": "hi", "reply": "hello", "finish": "length",
           "model_calls": 2, "tool_calls": 1, "replayed": [0, 0], "prompt_tokens": 9, "completion_tokens": 3,
           "cached_tokens": 0, "cache_write_tokens": 0, "reset": None, "parts": 1}
    assert with_texts([old, {"at": 2.0, "id": "e", "dead": "malformed"}], None) == [
        old, {"at": 2.0, "id": "e", "dead": "malformed"}]
