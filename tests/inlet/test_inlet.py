"""The stream inlet against a real Redis of the test's own (in-process inlets, stepped by hand): accepted then
acknowledged, idempotent by message id, moved aside with a reason, held (never dropped) while a mailbox is full or the
store is down, and a conversation's order kept when two inlets share the stream."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from tests.support.redis_server import RedisServer, redis_of_its_own
from worker.client import ConversationClient
from worker.envelopes.inputs import decode_envelope
from worker.inlet.stream import Inlet, dead_stream
from worker.store.limits import StoreLimits
from worker.store.redis_store import ConversationStore

STREAM, GROUP = "parley:inlet", "parley-inlet"


server = pytest.fixture(redis_of_its_own)


class Rig:
    def __init__(self, server: RedisServer, max_inbox: int = 1000) -> None:
        self.r = server.client()
        self.store = ConversationStore(self.r, prefix="t", limits=StoreLimits(max_inbox=max_inbox))
        self.client = ConversationClient(self.store, wake=lambda cid: None)

    def inlet(self, name: str, client: ConversationClient | None = None, **kw: Any) -> Inlet:
        inlet = Inlet(self.r, client or self.client, STREAM, GROUP, name, block_ms=1, retry_seconds=0, **kw)
        inlet.ensure_group()
        return inlet

    def publish(self, **message: Any) -> str:
        eid: Any = self.r.xadd(STREAM, {"envelope": json.dumps(message)})
        return str(eid.decode())

    def inbox(self, cid: str) -> list[tuple[str, str | None]]:
        return [(mid, decode_envelope(p).text) for mid, p in self.store.inbox(cid)]

    def pending(self) -> int:
        return int(self.r.xpending(STREAM, GROUP)["pending"])

    def dead(self) -> list[dict[str, str]]:
        entries: Any = self.r.xrange(dead_stream(STREAM))
        return [{k.decode(): v.decode() for k, v in f.items()} for _, f in entries]


def test_messages_events_and_resets_are_accepted_in_order_then_acknowledged(server: RedisServer) -> None:
    rig = Rig(server)
    rig.publish(kind="event", conversation_id="c1", text="tagged the theatre", message_id="e1", pinned=True)
    eid = rig.publish(kind="message", conversation_id="c1", text="where next?")
    rig.publish(kind="reset", conversation_id="c1")
    inlet = rig.inlet("a")
    assert inlet.step() == 3
    assert rig.inbox("c1") == [("e1", "tagged the theatre"), (f"{STREAM}/{eid}", "where next?"),
                               (rig.inbox("c1")[2][0], None)]
    assert rig.pending() == 0 and rig.dead() == []


def test_an_event_may_set_a_fact_and_ask_for_an_answer(server: RedisServer) -> None:
    rig = Rig(server)
    rig.publish(kind="event", conversation_id="c1", text="Your target is Harrogate Theatre", message_id="e1",
                key="target", respond=True)
    assert rig.inlet("a").step() == 1
    [(_, payload)] = rig.store.inbox("c1")
    env = decode_envelope(payload)
    assert (env.key, env.respond) == ("target", True) and rig.dead() == []


def test_a_redelivered_entry_is_a_duplicate(server: RedisServer) -> None:
    rig = Rig(server)
    rig.publish(kind="message", conversation_id="c1", text="hi")  # no message id: the entry's id stands for it
    inlet = rig.inlet("a")
    entries = inlet._read(">")
    inlet.apply(entries)
    inlet.apply(entries)  # as after a crash between the accept and the acknowledgement
    assert len(rig.inbox("c1")) == 1


@pytest.mark.parametrize(("raw", "reason"), [
    ("{not json", "not JSON"), ("[1]", "not a JSON object"), ('{"kind": "vote", "conversation_id": "c1"}', "kind"),
    ('{"kind": "message", "text": "hi"}', "conversation_id"),
    ('{"kind": "message", "conversation_id": "c1", "text": "hi", "respond": true}', "respond"),
    ('{"kind": "event", "conversation_id": "a:b", "text": "hi"}', "conversation_id"),
    ('{"kind": "event", "conversation_id": "c1", "text": "' + "x" * 16_001 + '"}', "text"),
    ('{"kind": "event", "conversation_id": "c1", "text": "\\ud800"}', "text"),
])
def test_what_cannot_be_accepted_is_moved_aside_with_its_reason(server: RedisServer, raw: str, reason: str) -> None:
    rig = Rig(server)
    eid = rig.r.xadd(STREAM, {"envelope": raw}).decode()  # type: ignore[union-attr]
    rig.publish(kind="event", conversation_id="c1", text="after it")
    rig.inlet("a").step()
    [dead] = rig.dead()
    assert dead["entry_id"] == eid and dead["reason"].startswith(reason) and dead["envelope"] == raw
    assert rig.inbox("c1") == [(rig.inbox("c1")[0][0], "after it")]  # the next one is not held up
    assert rig.pending() == 0


def test_a_full_mailbox_holds_the_entry_and_it_is_accepted_once_there_is_room(server: RedisServer) -> None:
    rig = Rig(server, max_inbox=1)
    for i in range(3):
        rig.publish(kind="event", conversation_id="c1", text=f"e{i}", message_id=f"e{i}")
    rig.publish(kind="event", conversation_id="c2", text="other", message_id="o")
    inlet = rig.inlet("a")
    inlet.step()
    assert rig.inbox("c1") == [("e0", "e0")] and rig.inbox("c2") == [("o", "other")]  # c2 is not held up
    assert rig.pending() == 2 and rig.dead() == []
    for expected in ("e1", "e2"):
        rig.r.delete(rig.store.keys("c1").inbox)  # a worker applied the input
        inlet.step()
        assert rig.inbox("c1") == [(expected, expected)]
    assert rig.pending() == 0


def test_a_store_outage_holds_the_entries_and_they_are_accepted_later(server: RedisServer) -> None:
    rig = Rig(server)
    down = ConversationClient(ConversationStore(redis.Redis(port=1, socket_connect_timeout=0.1), prefix="t"),
                              wake=lambda cid: None)
    rig.publish(kind="message", conversation_id="c1", text="one", message_id="m1")
    rig.publish(kind="message", conversation_id="c2", text="two", message_id="m2")
    rig.inlet("a", client=down).step()
    assert rig.pending() == 2 and rig.dead() == []
    rig.inlet("a").step()  # the same consumer, its store back
    assert rig.inbox("c1") == [("m1", "one")] and rig.inbox("c2") == [("m2", "two")] and rig.pending() == 0


def test_two_inlets_keep_a_conversations_order(server: RedisServer) -> None:
    rig = Rig(server)
    a, b = rig.inlet("a", batch=1), rig.inlet("b", batch=1)
    rig.publish(kind="event", conversation_id="c1", text="first", message_id="1")
    rig.publish(kind="event", conversation_id="c1", text="second", message_id="2")
    rig.publish(kind="event", conversation_id="c2", text="other", message_id="3")
    first = a._read(">")  # a has read the first entry and not applied it yet (slow, or about to crash)
    b.step()  # b reads the second: it must wait for the first; then the third (another conversation): accepted
    b.step()
    assert rig.inbox("c1") == [] and rig.inbox("c2") == [("3", "other")]
    a.apply(first)
    b.step()  # b's own pending entry, tried again
    assert rig.inbox("c1") == [("1", "first"), ("2", "second")] and rig.pending() == 0


def test_an_entry_a_crashed_inlet_left_is_claimed(server: RedisServer) -> None:
    rig = Rig(server)
    rig.publish(kind="event", conversation_id="c1", text="first", message_id="1")
    rig.publish(kind="event", conversation_id="c1", text="second", message_id="2")
    rig.inlet("crashed", batch=1)._read(">")  # read, never applied
    survivor = rig.inlet("b", claim_idle_ms=1)
    import time

    time.sleep(0.01)
    survivor.step()
    survivor._claim_at = 0
    survivor.step()
    assert rig.inbox("c1") == [("1", "first"), ("2", "second")] and rig.pending() == 0


def test_a_held_entry_holds_the_later_entries_of_its_batch_not_the_earlier(server: RedisServer) -> None:
    """One batch of b holds 1 (c1), 3 (c1) and 4 (c2), while a still has 2 (c1) pending: 1 goes in (nothing of c1
    is older), 3 waits for 2, 4 goes in. The inputs of a batch go to the store together (a round trip per wave);
    the hold of 3 must not reach back to 1."""
    rig = Rig(server)
    a, b = rig.inlet("a", batch=1), rig.inlet("b", batch=10)
    rig.publish(kind="event", conversation_id="c1", text="one", message_id="1")
    rig.publish(kind="event", conversation_id="c1", text="two", message_id="2")
    rig.publish(kind="event", conversation_id="c1", text="three", message_id="3")
    rig.publish(kind="event", conversation_id="c2", text="four", message_id="4")
    first = b._read(">")[:1]  # b reads 1 ...
    rig.r.xgroup_setid(STREAM, GROUP, first[0][0])  # ... a reads 2, then b the rest, as interleaved reads would
    second = a._read(">")
    rest = b._read(">")
    assert b.apply(first + rest) == 2
    assert rig.inbox("c1") == [("1", "one")] and rig.inbox("c2") == [("4", "four")]
    a.apply(second)
    b.step()
    assert rig.inbox("c1") == [("1", "one"), ("2", "two"), ("3", "three")] and rig.pending() == 0


def test_a_batch_of_many_conversations_is_accepted_in_few_round_trips(server: RedisServer) -> None:
    rig = Rig(server)
    for i in range(40):
        rig.publish(kind="event", conversation_id=f"c{i % 4}", text=f"{i}", message_id=f"m{i}")
    calls: list[int] = []
    accept_many = rig.store.accept_many

    def counted(inputs: Any) -> Any:
        calls.append(len(inputs))
        return accept_many(inputs)

    rig.store.accept_many = counted  # type: ignore[method-assign]
    assert rig.inlet("a", batch=40).step() == 40
    assert calls == [4] * 10  # a wave holds one entry of each conversation
    for c in range(4):
        assert [text for _, text in rig.inbox(f"c{c}")] == [str(i) for i in range(c, 40, 4)]


def test_an_entry_naming_the_player_by_user_id_reaches_their_phone_conversation(server: RedisServer) -> None:
    """A player's phone number and business-scoped user id, once a webhook linked them, name one conversation: the
    batch's ids are resolved in one round trip."""
    rig = Rig(server)
    rig.store.link_identity("16505551234", "US.13491208655302741918")
    rig.publish(kind="event", conversation_id="US.13491208655302741918", text="tagged the theatre", message_id="e1")
    rig.publish(kind="message", conversation_id="16505551234", text="where next?", message_id="m1")
    assert rig.inlet("a").step() == 2
    assert rig.inbox("16505551234") == [("e1", "tagged the theatre"), ("m1", "where next?")]
    assert rig.inbox("US.13491208655302741918") == []
