"""Fair scheduling: a drain applies a bounded share of one conversation's inputs, then hands it back to the queue.

Without the bound, a conversation flooded by a game engine keeps its worker slot until its mailbox is empty while
the quiet conversations queued behind it wait. These tests pin the hand-back: the bound in inputs and in seconds,
the lease and the head's attempt count after it, the order and once-only application across hand-backs, the queue
position it gives the flood (behind the others), and the sweeper as the net under a lost wake-up.
"""

from __future__ import annotations

from tests.configs import bare_config
from tests.worker.conftest import Harness, make_harness
from worker import ScriptedModel

BASE = bare_config(system_prompt="You are a test.")


def _harness(**bounds: float) -> tuple[Harness, list[str]]:
    seen: list[str] = []

    def answer(req):  # type: ignore[no-untyped-def]
        seen.append(req.messages[-1].content)
        return "ack:" + req.messages[-1].content

    return make_harness(ScriptedModel(default=answer), config=bare_config(system_prompt="You are a test.", **bounds)), seen


def _flood(h: Harness, cid: str, n: int) -> None:
    for i in range(n):
        h.client.send_message(cid, f"{cid} {i}", message_id=f"{cid}-{i}")


def test_a_drain_hands_the_conversation_back_after_its_share_of_inputs() -> None:
    h, seen = _harness(drain_max_turns=10)
    _flood(h, "flood", 25)
    h.woken.clear()
    assert h.service.drain("flood") == 10
    assert ("drain", "flood") in h.woken  # back in the queue, behind whatever was already there
    # The lease is free and the attempt the last commit counted at the new head was given back: the next drain
    # starts at once and sees the head's first attempt, not a second (which would look like a crash).
    begin = h.store.begin("flood", 5000)
    assert begin.status == "ok" and begin.attempts == 1
    assert begin.snapshot is not None and begin.snapshot.input_id == "flood-10"
    h.store.release("flood", begin.token)
    h.run()
    assert seen == [f"flood {i}" for i in range(25)]  # in order, each once, across three drains


def test_quiet_conversations_are_answered_between_a_floods_shares() -> None:
    h, seen = _harness(drain_max_turns=5)
    _flood(h, "flood", 20)
    h.client.send_message("quiet", "quiet 0", message_id="q0")  # queued behind the flood's wake-ups
    h.run()
    # The flood's first share, then the quiet conversation, then the rest of the flood: not after all 20.
    assert seen.index("quiet 0") == 5
    assert [s for s in seen if s.startswith("flood")] == [f"flood {i}" for i in range(20)]


def test_the_bound_in_seconds_hands_back_after_the_commit_that_crossed_it() -> None:
    h, seen = _harness(drain_max_seconds=1e-9)
    _flood(h, "flood", 3)
    h.woken.clear()
    assert h.service.drain("flood") == 1  # a turn is never cut short: the check follows each commit
    h.run()
    assert seen == ["flood 0", "flood 1", "flood 2"]


def test_without_a_bound_one_drain_empties_the_mailbox() -> None:
    h, _ = _harness(drain_max_turns=0, drain_max_seconds=0)
    _flood(h, "flood", 30)
    h.woken.clear()
    assert h.service.drain("flood") == 30
    assert ("drain", "flood") not in h.woken


def test_a_lost_wake_up_after_a_hand_back_is_found_by_the_sweeper() -> None:
    h, seen = _harness(drain_max_turns=2)
    _flood(h, "flood", 4)
    h.woken.clear()
    h.service.drain("flood")
    assert h.woken.count(("drain", "flood")) == 1
    h.woken.clear()  # the process died before its wake-up reached the broker
    assert "flood" in h.store.stranded(100, older_than_ms=0, backlog_ms=0)
    h.service.drain("flood")
    h.run()
    assert seen == [f"flood {i}" for i in range(4)]


def test_a_drain_asks_for_one_compaction_however_many_turns_needed_it() -> None:
    from worker import Summarize

    seen: list[str] = []
    h = make_harness(ScriptedModel(default=lambda req: seen.append("x") or "ack"),
                     compactor=Summarize(ScriptedModel(default="summary"), keep_last=2, batch=2), config=BASE)
    _flood(h, "c", 12)
    h.woken.clear()
    h.service.drain("c")
    assert len(seen) == 12
    assert h.woken.count(("compact", "c")) == 1
