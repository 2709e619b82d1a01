"""The pace with several business numbers: each number has its own throughput and its own pair rate with a player
(the platform's limits are per number), so one number at its limit never holds another's sends."""

from __future__ import annotations

import pytest

from tests.worker.conftest import make_harness
from worker import ScriptedModel
from worker.service import Pacer, RetryLater
from worker.settings.business_numbers import Number, Numbers
from worker.store.limits import PaceLimits

MAIN, QUIZ = "106540352242922", "106540352242923"
PLAYER = "447700900123"
NUMBERS = Numbers(Number(MAIN, "t1"), (Number(QUIZ, "t2"),))


def pacer(limits: PaceLimits) -> Pacer:
    h = make_harness(ScriptedModel(default=lambda req: "ack"))
    return Pacer(h.store, MAIN, limits, max_sleep=0.0, sleep=lambda s: None, route=NUMBERS.route)


def test_the_pair_rate_is_per_number() -> None:
    p = pacer(PaceLimits(per_second=0, recipient_per_second=0.01, recipient_burst=1))
    p.admit(PLAYER)
    with pytest.raises(RetryLater, match="recipient"):
        p.admit(PLAYER)  # the main number's pair budget with this player is spent
    p.admit(f"{QUIZ}.{PLAYER}")  # the quiz number's is not
    with pytest.raises(RetryLater, match="recipient"):
        p.admit(f"{QUIZ}.{PLAYER}")


def test_the_throughput_is_per_number() -> None:
    p = pacer(PaceLimits(per_second=0.01, burst=1, recipient_per_second=0))
    p.admit("447700900001")
    with pytest.raises(RetryLater, match="number"):
        p.admit("447700900002")  # the main number is at its rate
    p.admit(f"{QUIZ}.447700900003")  # the quiz number is not
    with pytest.raises(RetryLater, match="number"):
        p.admit(f"{QUIZ}.447700900004")


def test_without_a_route_every_recipient_is_on_the_one_number() -> None:
    h = make_harness(ScriptedModel(default=lambda req: "ack"))
    p = Pacer(h.store, MAIN, PaceLimits(per_second=0.01, burst=1, recipient_per_second=0), max_sleep=0.0)
    p.admit("447700900001")
    with pytest.raises(RetryLater):
        p.admit(f"{QUIZ}.447700900003")  # one number configured: a dotted id is just another recipient on it
