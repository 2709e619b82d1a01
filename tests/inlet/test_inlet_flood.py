"""A flood from one player on the stream inlet: however many of its entries are pending, another conversation's
entries go in at once, a held conversation is tried again only once its mailbox has room, and the pending index
that keeps the order forgets what is no longer pending."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.inlet.test_inlet import GROUP, STREAM, Rig
from tests.support.redis_server import RedisServer, redis_of_its_own
from worker.inlet.held import HeldEntries
from worker.store.keys import InletKeys

server = pytest.fixture(redis_of_its_own)


def _flood(rig: Rig, cid: str, n: int) -> None:
    pipe = rig.r.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(STREAM, {"envelope": json.dumps({"kind": "message", "conversation_id": cid, "text": f"spam {i}",
                                                   "message_id": f"{cid}-{i}"})})
    pipe.execute()


def test_ten_thousand_pending_entries_of_one_player_never_hold_another_players_input(server: RedisServer) -> None:
    rig = Rig(server)
    _flood(rig, "flooder", 10_001)
    rig.inlet("slow", batch=20_000)._read(">")  # another inlet read the flood and has not applied it yet
    rig.publish(kind="message", conversation_id="player", text="where next?", message_id="p1")
    assert rig.inlet("a").step() == 1
    assert rig.inbox("player") == [("p1", "where next?")]


def test_a_held_conversation_is_tried_again_only_once_its_mailbox_has_room(server: RedisServer,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    rig = Rig(server, max_inbox=1)
    _flood(rig, "flooder", 50)
    inlet = rig.inlet("a")
    inlet.step()
    assert [m for m, _ in rig.inbox("flooder")] == ["flooder-0"] and rig.pending() == 49
    tried: list[Any] = []
    accept_many = rig.store.accept_many
    monkeypatch.setattr(rig.store, "accept_many", lambda items: tried.append(items) or accept_many(items))
    for _ in range(5):
        inlet.step()  # the mailbox is still full: nothing to try
    assert tried == []
    rig.r.delete(rig.store.keys("flooder").inbox)  # a worker applied the input: room for one
    inlet.step()
    # one round trip accepts the next entry, the one after it finds the mailbox full again
    assert [m for m, _ in rig.inbox("flooder")] == ["flooder-1"] and len(tried) == 2


def test_the_pending_index_holds_only_pending_entries(server: RedisServer) -> None:
    rig = Rig(server, max_inbox=2)
    _flood(rig, "c1", 5)
    rig.publish(kind="vote", conversation_id="c2")  # moved aside
    inlet = rig.inlet("a")
    inlet.step()
    index = InletKeys(STREAM).pending
    assert rig.r.zcard(index) == 3 == rig.pending()  # c1's three held entries
    rig.r.delete(rig.store.keys("c1").inbox)
    while rig.pending():
        rig.r.delete(rig.store.keys("c1").inbox)
        inlet.step()
    assert rig.r.zcard(index) == 0 and rig.r.xpending(STREAM, GROUP)["pending"] == 0


def test_held_entries_stay_in_stream_order_when_an_older_one_is_claimed_later() -> None:
    held = HeldEntries()
    for eid in (b"5-0", b"7-0", b"3-1", b"10-0"):  # 3-1: claimed from a crashed inlet after 5 and 7 were held
        held.hold("c1", eid, full=False)
    assert held.due(10, lambda cids: [True] * len(cids)) == [b"3-1", b"5-0", b"7-0", b"10-0"]
