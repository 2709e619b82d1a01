"""parley_reply_latency_seconds: what a player waited, from the accept of the input a reply answers to the send of
the reply's first part; once per reply (a reply of several parts is one wait), never for a reply no input asked
for (an old record without the accept time); a held input (``at=``) counts from when it was due."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from prometheus_client import REGISTRY

from tests.worker.conftest import make_harness
from worker import ScriptedModel
from worker.envelopes.inputs import ReplyRecord, decode_envelope, decode_reply
from worker.service.timer_loop import TimerLoop

CID = "447700900123"


def _latency() -> tuple[float, float]:
    return (REGISTRY.get_sample_value("parley_reply_latency_seconds_count") or 0.0,
            REGISTRY.get_sample_value("parley_reply_latency_seconds_sum") or 0.0)


def test_the_wait_runs_from_the_accept_to_the_first_part_once_per_reply() -> None:
    h = make_harness(ScriptedModel(default=lambda req: "long answer " * 700))  # over WhatsApp's 4096: parts
    count, total = _latency()
    started = time.time()
    h.client.send_message(CID, "first", message_id="wamid.1")
    h.client.send_message(CID, "second", message_id="wamid.2")
    time.sleep(0.2)  # the queue's wait is part of what the player waited
    h.run()
    waited = time.time() - started
    assert len(h.channel.sent) >= 4  # two replies of several parts each
    new_count, new_total = _latency()
    assert new_count == count + 2
    assert 2 * 0.2 <= new_total - total <= 2 * waited


def test_a_reply_record_keeps_the_accept_time_and_an_old_one_reads_without_it() -> None:
    record = ReplyRecord(reply_id="r", conversation_id=CID, recipient=CID, parts=["hi"], accepted_at=1700000000.5)
    assert decode_reply(record.to_bytes()).accepted_at == 1700000000.5
    old = ReplyRecord(reply_id="r", conversation_id=CID, recipient=CID, parts=["hi"])
    assert b"accepted_at" not in old.to_bytes() and decode_reply(old.to_bytes()).accepted_at is None


def test_a_held_input_is_accepted_when_due_so_its_reply_is_not_timed_from_the_scheduling() -> None:
    h = make_harness()
    due = datetime.now(UTC) + timedelta(hours=1)
    h.client.send_message(CID, "later", message_id="m-later", at=due)
    assert TimerLoop(h.store, lambda cid: None, clock=lambda: due.timestamp() + 1).run_once() == 1
    [(_, entry)] = h.store.inbox(CID)
    assert decode_envelope(entry).accepted_at == int(due.timestamp() * 1000) / 1000
