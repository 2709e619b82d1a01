"""Bad input to the producer API is refused with the project's own error and a sentence, and queues nothing."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import fakeredis
import pytest

from worker.client import ConversationClient
from worker.errors import InputError, InvalidTextError
from worker.store.redis_store import ConversationStore

LONE = "\ud83d"  # half of a surrogate pair: a Python str can hold it, UTF-8 cannot


@pytest.fixture
def setup() -> tuple[ConversationClient, fakeredis.FakeRedis, list[str]]:
    r = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    woken: list[str] = []
    store = ConversationStore(r, prefix=f"t{uuid.uuid4().hex[:6]}")
    return ConversationClient(store, woken.append), r, woken


CASES: dict[str, Callable[[ConversationClient], Any]] = {
    "message text": lambda c: c.send_message("447700900123", f"hello {LONE} there"),
    "event text": lambda c: c.send_event("447700900123", f"User tagged {LONE}", pinned=True),
    "system": lambda c: c.send_message("447700900123", "hi", system=f"You are {LONE}"),
    "message_id": lambda c: c.send_message("447700900123", "hi", message_id=f"wamid.{LONE}"),
    "event message_id": lambda c: c.send_event("447700900123", "x", message_id=LONE),
    "reset message_id": lambda c: c.reset("447700900123", message_id=f"r{LONE}"),
    "reply_to": lambda c: c.send_message("447700900123", "hi", reply_to=f"wamid.{LONE}"),
    "recipient": lambda c: c.send_message("447700900123", "hi", recipient=f"4477{LONE}"),
    "conversation id": lambda c: c.send_message(f"4477{LONE}", "hi"),
    "deleted conversation id": lambda c: c.delete(f"4477{LONE}"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_lone_surrogate_is_an_input_error_and_queues_nothing(
        setup: tuple[ConversationClient, fakeredis.FakeRedis, list[str]], case: str) -> None:
    client, r, woken = setup
    with pytest.raises(InputError) as info:
        CASES[case](client)
    message = str(info.value)
    assert message and "\n" not in message
    message.encode("utf-8")  # the sentence itself can be logged
    assert r.keys("*") == [] and woken == []


def test_the_error_names_the_field_and_the_position(setup: tuple[ConversationClient, fakeredis.FakeRedis,
                                                                 list[str]]) -> None:
    client, _, _ = setup
    with pytest.raises(InvalidTextError, match=r"system .*position 4"):
        client.send_message("447700900123", "hi", system=f"You {LONE}")


def test_text_that_is_not_a_string_is_an_input_error(setup: tuple[ConversationClient, fakeredis.FakeRedis,
                                                                 list[str]]) -> None:
    client, r, _ = setup
    for bad in (12, ["a"], {"t": 1}):
        with pytest.raises(InputError) as info:
            client.send_message("447700900123", bad)  # type: ignore[arg-type]
        assert "\n" not in str(info.value)
    assert r.keys("*") == []


def test_well_formed_text_with_astral_characters_is_accepted(setup: tuple[ConversationClient, fakeredis.FakeRedis,
                                                                         list[str]]) -> None:
    client, _, woken = setup
    assert not client.send_message("447700900123", "Harrogate \U0001f3ad theatre", system="é").duplicate
    assert woken == ["447700900123"]
