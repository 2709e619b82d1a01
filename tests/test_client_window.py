"""What opens WhatsApp's 24-hour window: anything the player sent (a chat turn, a message Parley answers with the
short notice, a location pin or a reaction the ingress turns into an event), never a game engine's event or a
producer's own notice. Checked at the client, and through the real ingress on every shared fixture."""

from __future__ import annotations

from collections.abc import Iterator

import fakeredis
import pytest
import redis

from tests.ingress.test_outcomes import OUTCOMES, RedisRig, payload_of, real_redis
from tests.support.whatsapp_fixtures import fixture_names
from worker.client import ConversationClient
from worker.store.redis_store import ConversationStore

__all__ = ["real_redis"]  # the fixture, used by name

CID = "447700900123"


@pytest.fixture
def client() -> ConversationClient:
    store = ConversationStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix="w")
    return ConversationClient(store, lambda cid: None)


@pytest.mark.parametrize(("send", "opens"), [
    (lambda c: c.send_message(CID, "hi"), True),
    (lambda c: c.send_notice(CID, "Sorry, text only.", reply_to="wamid.voice"), True),
    (lambda c: c.send_event(CID, "The player shared their location", from_player=True), True),
    (lambda c: c.send_event(CID, "User has just tagged Harrogate Theatre"), False),
    (lambda c: c.send_notice(CID, "The game starts in an hour."), False),
    (lambda c: c.reset(CID), False),
])
def test_what_the_player_sent_opens_the_window(client: ConversationClient, send: object, opens: bool) -> None:
    send(client)  # type: ignore[operator]
    assert (client.store.last_inbound(CID) is not None) is opens


@pytest.fixture
def rig(real_redis: redis.Redis) -> Iterator[RedisRig]:
    rig = RedisRig(real_redis)
    yield rig
    rig.cleanup()


@pytest.mark.parametrize("name", fixture_names(keep=lambda f: OUTCOMES.get(f) not in (None, "refused")))
def test_every_inbound_fixture_opens_the_window_or_not(rig: RedisRig, name: str) -> None:
    assert rig.post(payload_of(name)).status_code == 200
    opened = [k for k in rig.r.scan_iter(match=f"{rig.prefix}:*:inbound")]
    assert bool(opened) is (OUTCOMES[name] in ("turn", "event", "notice")), (name, opened)
