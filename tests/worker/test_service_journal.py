"""The service's turn journal: a turn that died after a tool call is retried by the drainer without calling the tool
or the model for the recorded rounds again, and a worker that lost its lease mid-turn stops before acting on."""

from __future__ import annotations

import fakeredis
import msgpack
import pytest

from tests.worker.conftest import make_harness
from worker.client.summary import with_texts
from worker.conversation.model import ModelRequest
from worker.conversation.scripted import Reply, ScriptedModel
from worker.conversation.tools import Tool

CID = "447700900777"


class Killed(BaseException):
    """Stands for SIGKILL: the drain stops right there (the drainer gives the lease up and re-raises)."""


def _final(request: ModelRequest) -> str:
    return "final: " + " | ".join(m.content for m in request.messages if m.role == "tool")


def test_a_retried_turn_reuses_the_recorded_round_and_result() -> None:
    calls: list[int] = []

    def give(amount: int) -> dict[str, int]:
        calls.append(amount)
        return {"gold": 100 + amount}

    tool = Tool("give_gold", "Give gold.", {"type": "object", "properties": {"amount": {"type": "integer"}}}, give)
    model = ScriptedModel([Reply(tool_calls=(("give_gold", {"amount": 5}),)), Killed("between the tool and the commit")],
                          default=None)
    h = make_harness(model, tools=[tool])
    h.client.send_message(CID, "give me gold", message_id="m1")
    with pytest.raises(Killed):
        h.service.drain(CID)
    assert calls == [5] and not h.channel.sent
    assert h.store.read_journal(CID, "m1").rounds  # the round and its result are in Redis

    model.push(_final)
    assert h.service.drain(CID) == 1
    assert calls == [5], "the game saw the side-effecting call twice"
    assert len(model.requests) == 3  # round 0 was not asked again: one live call after the kill
    assert [t for _, t, _ in h.channel.sent] == ['final: {"gold": 105}']
    assert h.store._client.exists(h.store.keys(CID).journal) == 0  # the commit deleted the journal
    [trace] = with_texts([msgpack.unpackb(h.store.trace(CID)[-1])], h.store.read_state(CID).blob)
    assert trace["replayed"] == [1, 1] and trace["tool_calls"] == 0 and trace["model_calls"] == 1


def test_a_worker_fenced_out_mid_turn_stops_and_the_next_repeats_the_call_with_the_same_id() -> None:
    r = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    seen: list[int] = []
    holder: dict[str, object] = {}

    def act(n: int) -> str:
        seen.append(n)
        if len(seen) == 1:  # while the first worker is inside the call, another takes the conversation over
            store = holder["store"]
            store._client.delete(store.keys(CID).lease)  # type: ignore[attr-defined]
            holder["token"] = store.begin(CID, 10_000).token  # type: ignore[attr-defined]
        return f"done {n}"

    tool = Tool("act", "Act.", {"type": "object", "properties": {"n": {"type": "integer"}}}, act)
    model = ScriptedModel([Reply(tool_calls=(("act", {"n": 1}),))], default=None)
    h = make_harness(model, tools=[tool], redis_client=r)
    holder["store"] = h.store
    h.client.send_message(CID, "act", message_id="m1")
    assert h.service.drain(CID) == 0  # fenced out: no commit, no reply
    assert not h.channel.sent and h.store.read_journal(CID, "m1").results == {}
    round0 = h.store.read_journal(CID, "m1").rounds[0]
    h.store.release(CID, holder["token"])  # type: ignore[arg-type]

    model.push(_final)
    assert h.service.drain(CID) == 1
    assert seen == [1, 1]  # its result was never recorded: repeated ...
    call_id = msgpack.unpackb(round0)["m"]["tc"][0][0]
    assert [m.tool_call_id for m in model.requests[-1].messages if m.role == "tool"] == [call_id]  # ... same id
    assert [t for _, t, _ in h.channel.sent] == ["final: done 1"]


def _counter(name: str, **labels: str) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_damaged_journal_entry_is_skipped_with_a_metric_and_the_turn_goes_on_live() -> None:
    calls: list[int] = []
    tool = Tool("act", "Act.", {"type": "object", "properties": {"n": {"type": "integer"}}},
                lambda n: calls.append(n) or "ok")
    model = ScriptedModel([Reply(tool_calls=(("act", {"n": 1}),)), _final], default=None)
    h = make_harness(model, tools=[tool])
    h.client.send_message(CID, "act", message_id="m1")
    token = h.store.begin(CID, 10_000).token
    h.store.record_step(CID, token, "m1", step=0, entry=b"\xc1 not msgpack")
    h.store.release(CID, token)
    before = _counter("parley_journal_unrecorded_total", reason="damaged")
    assert h.service.drain(CID) == 1
    assert _counter("parley_journal_unrecorded_total", reason="damaged") == before + 1
    assert calls == [1] and [t for _, t, _ in h.channel.sent] == ["final: ok"]


def test_a_full_journal_keeps_the_turn_going_and_counts_what_it_could_not_record() -> None:
    from worker.store.redis_store import ConversationStore, StoreLimits

    tool = Tool("act", "Act.", {"type": "object", "properties": {"n": {"type": "integer"}}}, lambda n: f"did {n}")
    model = ScriptedModel([Reply(tool_calls=(("act", {"n": 1}), ("act", {"n": 2}))), _final], default=None)
    h = make_harness(model, tools=[tool])
    small = ConversationStore(h.store._client, prefix=h.store.prefix, limits=StoreLimits(journal_max=2))
    h.service.drainer.store = small
    h.client.send_message(CID, "act", message_id="m1")
    before = _counter("parley_journal_unrecorded_total", reason="full")
    assert h.service.drain(CID) == 1
    assert _counter("parley_journal_unrecorded_total", reason="full") == before + 1  # the second result
    assert [t for _, t, _ in h.channel.sent] == ["final: did 1 | did 2"]
