"""The drain's hooks: each point is called where the drain promises, a hook can put an outcome in the place of a
turn, and a feature that is off is not in the list (so its points cost a turn nothing)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from tests.configs import bare_burst, bare_config
from tests.worker.conftest import Harness, make_harness
from worker import ScriptedModel
from worker.conversation.results import TurnResult
from worker.envelopes.inputs import ReplyRecord
from worker.service import Presence
from worker.service.drain import Drainer, DrainRun
from worker.service.drain.burst import Pending
from worker.service.drain.hooks import (
    Bursts,
    DailyBudget,
    DrainHook,
    DurableRecord,
    Fairness,
    Merge,
    OptOutHook,
    Paused,
    Photos,
    Prepare,
    Receipts,
    build_hooks,
)
from worker.service.drain.outcomes import Answer, Defer, Notice, Outcome
from worker.service.drain.stored_journal import StoreJournal
from worker.settings import OptOut
from worker.store.answers import Snapshot
from worker.testing import RecordingChannel

CID = "447700900123"
BASE = bare_config(system_prompt="You are a test.")


class Spy(DrainHook):
    """Notes each point it is called at (and, for the model call, when it is entered and left)."""

    def __init__(self, *, defer: float = 0.0, hand_back: bool = False) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.defer, self.give_back = defer, hand_back

    def before_turn(self, run: DrainRun, inputs: tuple[Pending, ...], prepare: Prepare) -> Outcome | None:
        self.calls.append(("before_turn", [p.id for p in inputs]))
        return None

    def take(self, run: DrainRun, head: Pending, snap: Snapshot,
             journal: StoreJournal) -> tuple[Pending, ...] | Defer | None:
        self.calls.append(("take", head.id))
        return Defer((head,), self.defer) if self.defer else None

    def again(self, run: DrainRun, inputs: tuple[Pending, ...], result: TurnResult, merges: int,
              journal: StoreJournal) -> tuple[Pending, ...] | None:
        self.calls.append(("again", result.reply, merges))
        return None

    @contextmanager
    def model_call(self, run: DrainRun, inputs: tuple[Pending, ...]):  # type: ignore[no-untyped-def,override]
        self.calls.append(("model_call", "enter"))
        yield
        self.calls.append(("model_call", "exit"))

    def deferred(self, run: DrainRun, defer: Defer) -> None:
        self.calls.append(("deferred", [p.id for p in defer.inputs], defer.wait))

    def entry(self, run: DrainRun, snap: Snapshot, outcome: Outcome, reply: ReplyRecord | None) -> bytes | None:
        self.calls.append(("entry", type(outcome).__name__, reply.parts if reply else None))
        return None

    def hand_back(self, run: DrainRun) -> bool:
        self.calls.append(("hand_back", run.applied))
        return self.give_back


def _with(h: Harness, *hooks: DrainHook) -> Harness:
    s = h.service
    s.drainer = Drainer(h.store, s.chat, s.wake, s.config, s.heartbeat, deliverer=s.deliverer, hooks=[Photos(), *hooks])
    return h


def test_a_turn_calls_each_point_in_its_place() -> None:
    seen: list[str] = []
    spy = Spy()
    model = ScriptedModel(default=lambda req: seen.append("model") or "ack")  # type: ignore[func-returns-value]
    h = _with(make_harness(model), spy)
    h.client.send_message(CID, "hello", message_id="m1")
    assert h.service.drain(CID) == 1
    assert spy.calls == [("take", "m1"), ("before_turn", ["m1"]), ("model_call", "enter"), ("again", "ack", 0),
                         ("model_call", "exit"), ("entry", "Answer", ["ack"])]
    assert seen == ["model"]


def test_hand_back_is_asked_after_each_commit_with_inputs_waiting_and_ends_the_drain() -> None:
    spy = Spy(hand_back=True)
    h = _with(make_harness(), spy)
    for i in range(3):
        h.client.send_message(CID, f"hi {i}", message_id=f"m{i}")
    h.woken.clear()
    assert h.service.drain(CID) == 1
    assert [c for c in spy.calls if c[0] == "hand_back"] == [("hand_back", 1)]
    assert ("drain", CID) in h.woken  # handed back to the queue
    spy.give_back = False
    assert h.service.drain(CID) == 2
    assert [c for c in spy.calls if c[0] == "hand_back"] == [("hand_back", 1), ("hand_back", 1)]  # none at the end


def test_a_deferral_gives_the_lease_up_and_tells_the_hooks() -> None:
    spy = Spy(defer=2.5)
    h = _with(make_harness(), spy)
    h.client.send_message(CID, "wait", message_id="m1")
    h.scheduled.clear()
    assert h.service.drain(CID) == 0
    assert spy.calls == [("take", "m1"), ("deferred", ["m1"], 2.5)]
    assert h.scheduled == [("drain", CID, 2.5)] and h.model.requests == []
    assert h.store.begin(CID, 1000).status != "ok"  # held for the rest of the quiet period


def test_a_hook_can_answer_in_the_place_of_the_turn() -> None:
    class Closed(DrainHook):
        def before_turn(self, run: DrainRun, inputs: tuple[Pending, ...], prepare: Prepare) -> Outcome | None:
            return Notice(inputs[0].env, "we are closed", "closed")

    spy = Spy()
    h = _with(make_harness(), Closed(), spy)
    h.client.send_message(CID, "hello", message_id="m1")
    assert h.service.drain(CID) == 1
    assert h.model.requests == [] and [t for _, t, _ in h.channel.sent] == ["we are closed"]
    assert spy.calls == [("take", "m1"), ("entry", "Notice", ["we are closed"])]  # the first answer wins


def test_features_that_are_off_are_not_in_the_list() -> None:
    store = make_harness().store
    off = build_hooks(store, replace(BASE, opt_out=OptOut(phrases=[], in_phrases=[])), Presence.disabled())
    assert [type(h) for h in off] == [Paused, Photos]  # any conversation can be paused, or send a photo
    on = bare_config(system_prompt="You are a test.", daily_token_budget=1000,
                     burst=bare_burst(quiet=1.0, merge=True), record=True, drain_max_turns=5)
    every = build_hooks(store, on, Presence(RecordingChannel(), enabled=True))
    assert [type(h) for h in every] == [OptOutHook, Paused, DailyBudget, Photos, Bursts, Merge, Receipts,
                                        DurableRecord, Fairness]
    # Opt-out phrases are on by default: the player's STOP is asked first.
    assert [type(h) for h in build_hooks(store, BASE, Presence.disabled())] == [OptOutHook, Paused, Photos]


def test_a_point_no_hook_overrides_is_not_called() -> None:
    h = make_harness()
    hooks = h.service.drainer.hooks
    assert [type(x) for x in hooks.all] == [OptOutHook, Paused, Photos]
    # The default drain calls only the opt-out's, the pause's and the photos' before_turn (and the opt-out's and the
    # pause's notice): every other point is an empty loop.
    assert hooks.at("before_turn") == hooks.all
    for point in ("take", "again", "model_call", "deferred", "entry", "hand_back"):
        assert hooks.at(point) == (), point


def test_replacing_the_presence_puts_its_hook_in_the_list() -> None:
    h = make_harness()
    presence = Presence(h.channel, enabled=True)
    h.service.drainer.presence = presence
    assert Receipts in [type(x) for x in h.service.drainer.hooks.all]


def test_an_answer_carries_what_its_commit_writes() -> None:
    got: list[Answer] = []

    class Keep(DrainHook):
        def entry(self, run: DrainRun, snap: Snapshot, outcome: Outcome, reply: ReplyRecord | None) -> bytes | None:
            assert isinstance(outcome, Answer)
            got.append(outcome)
            return None

    policy = bare_burst(quiet=5.0, max_messages=2)  # two messages fill the burst: no waiting
    h = _with(make_harness(config=replace(BASE, burst=policy)), Bursts(policy), Keep())
    h.client.send_message(CID, "wait", message_id="m1")
    h.client.send_message(CID, "which way", message_id="m2")
    assert h.service.drain(CID) == 2
    [answer] = got
    assert [p.id for p in answer.inputs] == ["m1", "m2"] and answer.also == ["m2"]
    assert answer.trace["burst"] == ["m1", "m2"] and answer.data == answer.reply.to_bytes()
    assert [t for _, t, _ in h.channel.sent] == [answer.reply.parts[0]]
