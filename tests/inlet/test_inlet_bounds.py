"""What the stream inlet keeps is bounded (DESIGN.md invariant 10): an acknowledged entry leaves the stream, and
``<stream>:dead`` keeps at most PARLEY_INLET_DEAD_MAX letters, none older than PARLEY_INLET_DEAD_MAX_AGE_SECONDS."""

from __future__ import annotations

import time

import pytest

from tests.inlet.test_inlet import STREAM, Rig
from tests.support.redis_server import RedisServer, redis_of_its_own
from worker.inlet.stream import dead_stream

server = pytest.fixture(redis_of_its_own)


def test_an_acknowledged_entry_leaves_the_stream_a_held_one_stays(server: RedisServer) -> None:
    rig = Rig(server, max_inbox=1)
    rig.publish(kind="message", conversation_id="c1", text="a player's words", message_id="m1")
    held = rig.publish(kind="message", conversation_id="c1", text="more words", message_id="m2")
    rig.r.xadd(STREAM, {"envelope": "{not json"})
    rig.inlet("a").step()
    assert [eid.decode() for eid, _ in rig.r.xrange(STREAM)] == [held]  # type: ignore[union-attr]
    assert rig.pending() == 1


def test_the_dead_letters_keep_at_most_their_number(server: RedisServer) -> None:
    rig = Rig(server)
    for i in range(5):
        rig.r.xadd(STREAM, {"envelope": f"{{not json {i}"})
    rig.inlet("a", dead_max=3).step()
    assert [f[b"envelope"] for _, f in rig.r.xrange(dead_stream(STREAM))] == [  # type: ignore[union-attr]
        b"{not json 2", b"{not json 3", b"{not json 4"]


def test_the_dead_letters_keep_none_older_than_their_age(server: RedisServer) -> None:
    rig = Rig(server)
    old_ms = int((time.time() - 3600) * 1000)
    rig.r.xadd(dead_stream(STREAM), {"entry_id": "0-1", "reason": "old", "envelope": "x"}, id=f"{old_ms}-0")
    rig.r.xadd(STREAM, {"envelope": "{not json"})
    rig.inlet("a", dead_max_age_s=60).step()
    assert [f[b"reason"] for _, f in rig.r.xrange(dead_stream(STREAM))] == [  # type: ignore[union-attr]
        b"not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"]
