"""A player's message keeps WhatsApp's time (its webhook ``timestamp``) from the webhook through a real turn into the
stored state; the reply takes the turn's. A signed webhook into the real ingress over the machine's Redis, a worker's
service draining the same Redis, and an OpenAI-compatible server on loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import redis

from tests.configs import bare_config
from tests.ingress.test_outcomes import RedisRig, real_redis
from tests.llm.servers import ScriptedServer, openai_text
from tests.llm.test_providers import openai_model
from worker import Chat
from worker.conversation.state import decode_state
from worker.envelopes.inputs import InputKind
from worker.service import ConversationService
from worker.testing import RecordingChannel

__all__ = ["real_redis"]  # the fixture, used by name

CID = "447700900123"
TURN = 1_900_000_000.0  # the worker's clock during the turn


def webhook(*messages: dict[str, object]) -> dict[str, object]:
    value = {"messaging_product": "whatsapp", "metadata": {"phone_number_id": "1"},
             "contacts": [{"wa_id": CID, "profile": {"name": "Sam"}}], "messages": [{"from": CID, **m} for m in messages]}
    return {"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [{"field": "messages",
                                                                                        "value": value}]}]}


@pytest.fixture
def rig(real_redis: redis.Redis) -> Iterator[RedisRig]:
    rig = RedisRig(real_redis)
    yield rig
    rig.cleanup()


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    s = ScriptedServer()
    yield s
    s.stop()


def drain(rig: RedisRig, server: ScriptedServer, state_format: int) -> None:
    chat = Chat(model=openai_model(server), auto_compact=False, clock=lambda: TURN, state_format=state_format)
    ConversationService(rig.store, chat, RecordingChannel(), lambda *a, **k: None,
                        bare_config(system_prompt="You are a guide.")).drain(CID)


def test_a_players_message_keeps_whatsapps_time_through_a_turn_and_the_reply_takes_the_turns(
        rig: RedisRig, server: ScriptedServer) -> None:
    sent = int(time.time()) - 600
    body = webhook({"id": "wamid.react", "timestamp": str(sent - 60), "type": "reaction",
                    "reaction": {"message_id": "wamid.ours", "emoji": "👍"}},
                   {"id": "wamid.text", "timestamp": str(sent), "type": "text", "text": {"body": "Where is the clue?"}})
    assert rig.post(body).status_code == 200
    assert [(e.kind, e.sent_at) for e in rig.envelopes(CID)] == [(InputKind.EVENT, sent - 60),
                                                                 (InputKind.MESSAGE, sent)]
    server.push(openai_text("By the church door."))
    drain(rig, server, 6)
    blob = rig.store.read_state(CID).blob
    assert blob[3] == 6
    st = decode_state(blob)
    assert [(m.role, m.content, m.at) for m in st.messages] == [
        ("user", st.messages[0].content, datetime.fromtimestamp(sent - 60, UTC)),  # the reaction, the player's
        ("user", "Where is the clue?", datetime.fromtimestamp(sent, UTC)),
        ("assistant", "By the church door.", datetime.fromtimestamp(TURN, UTC))]
    # What the model read carries no time.
    (request,) = server.requests
    assert str(sent) not in str(request["messages"]) and "at" not in request["messages"][-1]


def test_while_the_fleet_writes_format_5_nothing_is_timed(rig: RedisRig, server: ScriptedServer) -> None:
    sent = int(time.time()) - 600
    assert rig.post(webhook({"id": "wamid.t", "timestamp": str(sent), "type": "text",
                             "text": {"body": "Hi"}})).status_code == 200
    server.push(openai_text("Hello."))
    drain(rig, server, 5)
    blob = rig.store.read_state(CID).blob
    assert blob[3] == 5 and [m.at for m in decode_state(blob).messages] == [None, None]
