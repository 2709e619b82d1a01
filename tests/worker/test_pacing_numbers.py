"""The pace with several business numbers: each number has its own throughput and its own pair rate with a player
(the platform's limits are per number), so one number at its limit never holds another's sends."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.worker.conftest import make_harness
from worker import ScriptedModel
from worker.channels.by_number import NumbersChannel
from worker.channels.pacing import Pacer
from worker.channels.whatsapp import WhatsAppSender
from worker.errors import RetryLater
from worker.settings.business_numbers import Number, Numbers
from worker.store.limits import PaceLimits

MAIN, QUIZ = "106540352242922", "106540352242923"
PLAYER = "447700900123"
NUMBERS = Numbers(Number(MAIN, "t1"), (Number(QUIZ, "t2"),))


def pacer(limits: PaceLimits) -> Callable[[str], float]:
    """Admit a send to a recipient as the numbers' channel paces it: by the pacer of the sender it goes from."""
    h = make_harness(ScriptedModel(default=lambda req: "ack"))
    channel = NumbersChannel(NUMBERS, lambda n, token: WhatsAppSender(
        phone_number_id=n.phone_number_id, access_token=n.access_token, token=token,
        pacer=Pacer(h.store, n.phone_number_id, limits, max_sleep=0.0, sleep=lambda s: None)))

    def admit(recipient: str) -> float:
        sender, player = channel.sender_for(recipient)
        assert sender.pacer is not None
        return sender.pacer.admit(player)

    return admit


def test_the_pair_rate_is_per_number() -> None:
    p = pacer(PaceLimits(per_second=0, recipient_per_second=0.01, recipient_burst=1))
    p(PLAYER)
    with pytest.raises(RetryLater, match="recipient"):
        p(PLAYER)  # the main number's pair budget with this player is spent
    p(f"{QUIZ}.{PLAYER}")  # the quiz number's is not
    with pytest.raises(RetryLater, match="recipient"):
        p(f"{QUIZ}.{PLAYER}")


def test_the_throughput_is_per_number() -> None:
    p = pacer(PaceLimits(per_second=0.01, burst=1, recipient_per_second=0))
    p("447700900001")
    with pytest.raises(RetryLater, match="number"):
        p("447700900002")  # the main number is at its rate
    p(f"{QUIZ}.447700900003")  # the quiz number is not
    with pytest.raises(RetryLater, match="number"):
        p(f"{QUIZ}.447700900004")


def test_with_one_number_every_recipient_is_on_it() -> None:
    h = make_harness(ScriptedModel(default=lambda req: "ack"))
    p = Pacer(h.store, MAIN, PaceLimits(per_second=0.01, burst=1, recipient_per_second=0), max_sleep=0.0)
    p.admit("447700900001")
    with pytest.raises(RetryLater):
        p.admit(f"{QUIZ}.447700900003")  # one number configured: a dotted id is just another recipient on it
