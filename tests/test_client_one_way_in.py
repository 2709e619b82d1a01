"""The one way in: every input is built and checked by ``client.inputs`` and accepted by ``client.intake``; its kind is
a closed type whose values are the strings that travel; one rule says when a worker is woken."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import fakeredis
import msgpack
import pytest

from worker.client import ConversationClient
from worker.envelopes.inputs import InputKind
from worker.errors import EnvelopeError, OversizeInputError
from worker.queue.wakeup import wake_needed
from worker.store.redis_store import ConversationStore

CID = "447700900123"


@pytest.fixture
def client() -> ConversationClient:
    woken: list[str] = []
    return ConversationClient(ConversationStore(fakeredis.FakeRedis(), prefix="one"), wake=woken.append,
                              max_text_chars=20)


def test_the_kinds_travel_as_the_strings_they_always_were(client: ConversationClient) -> None:
    assert [k.value for k in InputKind] == ["message", "event", "reset", "splice", "notice", "operator"]
    checked = client.inputs.build("event", CID, {"text": "tagged"})
    assert checked.envelope.kind is InputKind.EVENT
    assert msgpack.unpackb(checked.envelope.to_bytes())["kind"] == "event"  # a plain string on the wire


@pytest.mark.parametrize(("kind", "arguments", "plain", "inbound"), [
    ("message", {"text": "hi"}, True, True),
    ("event", {"text": "tagged"}, True, False),
    ("event", {"text": "a pin", "from_player": True}, True, True),
    ("event", {"text": "round over", "respond": True}, False, False),  # ends a burst's quiet period
    ("reset", {}, False, False),  # drops the timers too
    ("operator", {"text": "a person"}, False, False),
    ("notice", {"text": "cannot read that", "reply_to": "wamid.1"}, False, True),
])
def test_what_may_be_accepted_apart_and_what_opens_the_window_follow_from_the_kind(
        client: ConversationClient, kind: str, arguments: dict[str, object], plain: bool, inbound: bool) -> None:
    checked = client.inputs.build(kind, CID, arguments)
    assert (checked.plain, checked.inbound) == (plain, inbound)


def test_an_input_held_for_later_is_not_plain_and_is_scheduled(client: ConversationClient) -> None:
    checked = client.inputs.message(CID, "later", at=datetime.now(UTC) + timedelta(minutes=5))
    assert checked.due_ms is not None and not checked.plain
    done = client.intake.accept(checked)
    assert done.scheduled and done.depth == 0 and client.store.inbox_depth(CID) == 0


def test_the_input_limit_holds_for_everything_but_a_notice(client: ConversationClient) -> None:
    with pytest.raises(OversizeInputError):
        client.inputs.build("event", CID, {"text": "x" * 21})
    assert client.inputs.notice(CID, "x" * 21).envelope.text == "x" * 21  # the deployment's own short answer
    with pytest.raises(EnvelopeError):
        client.inputs.build("splice", CID, {})  # no producer sends one


def test_a_batch_accepts_in_order_and_wakes_once_per_conversation() -> None:
    woken: list[str] = []
    client = ConversationClient(ConversationStore(fakeredis.FakeRedis(), prefix="batch"), wake=woken.append)
    inputs = [client.inputs.message(CID, f"m{i}", message_id=f"m{i}") for i in range(3)]
    done = client.intake.accept_many([*inputs, inputs[0]])
    assert [d.depth for d in done if not isinstance(d, Exception)] == [1, 2, 3, 3]
    assert [d.duplicate for d in done if not isinstance(d, Exception)] == [False, False, False, True]
    assert woken == [CID]


@pytest.mark.parametrize(("accepted", "was_empty", "ended_hold", "every", "wake"), [
    (True, True, False, False, True),  # the first input waiting
    (True, False, False, False, False),  # a worker is woken or draining already
    (True, False, True, False, True),  # it ended a burst's quiet period
    (True, False, False, True, True),  # the producer does not coalesce
    (False, True, True, True, False),  # a duplicate or a full mailbox wakes nobody
])
def test_the_one_rule_for_waking_a_worker(accepted: bool, was_empty: bool, ended_hold: bool, every: bool,
                                          wake: bool) -> None:
    assert wake_needed(accepted=accepted, was_empty=was_empty, ended_hold=ended_hold, every=every) is wake
