"""Issue 12 defects in the core: the pinned cap, the summariser's round trips, and compactor bugs."""

from __future__ import annotations

import logging
import random
import string

import pytest

from tests.conversation.conftest import make_tool
from worker import Chat, Compose, KeepLastExchanges, ScriptedModel, Summarize
from worker.conversation import ConversationState, Reply, RoundTrip, TokenCounter, Usage
from worker.conversation.state import decode_state


def _pinned_kept(state: bytes) -> set[str]:
    st = decode_state(state)
    return {m.content for m in st.messages if m.pinned} | {m.content for m in st.pinned}


def test_compaction_keeps_pinned_items_up_to_the_chat_cap_not_a_hidden_one() -> None:
    chat = Chat(model=ScriptedModel(default="a"), compactor=KeepLastExchanges(1), max_pinned=60)
    state: bytes | None = None
    for i in range(55):
        state = chat.append_to_state(state, f"fact {i}", pinned=True)
        _, state = chat.chat_with_state(state, user=f"q{i}")
    assert state is not None
    assert _pinned_kept(state) == {f"fact {i}" for i in range(55)}


def test_oversize_fallback_keeps_every_pinned_item() -> None:
    script: list[str | Reply] = []
    for _ in range(3):
        script += [Reply(tool_calls=(("lookup", {}),)), "done"]
    # Incompressible, so one exchange alone is over the limit and the encoder's last resort runs.
    rng = random.Random(7)
    bulk = "".join(rng.choice(string.ascii_letters) for _ in range(30_000))
    chat = Chat(model=ScriptedModel(script), tools=[make_tool(handler=lambda: bulk)],
                compactor=KeepLastExchanges(1), max_state_bytes=12_000, max_tool_result_chars=30_000)
    state: bytes | None = None
    for i in range(20):
        state = chat.append_to_state(state, f"fact {i}", pinned=True)
    results = []
    for i in range(3):
        results.append(chat.run_turn(state, user=f"look {i}"))
        state = results[-1].state
        assert len(state) <= 12_000
    assert state is not None
    assert _pinned_kept(state) == {f"fact {i}" for i in range(20)}
    assert [r.pinned_dropped for r in results] == [0, 0, 0]


def test_pinned_items_over_the_cap_are_counted_where_they_go() -> None:
    chat = Chat(model=ScriptedModel(default="a"), compactor=KeepLastExchanges(1), max_pinned=5)
    state: bytes | None = None
    dropped = 0
    for i in range(8):
        event = chat.apply_event(state, f"fact {i}", pinned=True)
        turn = chat.run_turn(event.state, user=f"q{i}")
        dropped += event.pinned_dropped + turn.pinned_dropped
        state = turn.state
    assert state is not None
    kept = _pinned_kept(state)
    assert len(decode_state(state).pinned) == 5
    assert dropped == 8 - len(kept)
    assert dropped > 0

    worker_chat = Chat(model=ScriptedModel(default="a"), compactor=KeepLastExchanges(1), max_pinned=2,
                       auto_compact=False)
    state = None
    for i in range(4):
        state = worker_chat.append_to_state(state, f"fact {i}", pinned=True)
        _, state = worker_chat.chat_with_state(state, user=f"q{i}")
    report = worker_chat.compact_with_report(state)
    # Three exchanges go with their pinned events; the cap keeps the newest two and counts the third.
    assert report.pinned_dropped == 1
    assert [m.content for m in decode_state(report.state).pinned] == ["fact 1", "fact 2"]
    # The worker counts what lands: the splice onto the newest state, not a result that may be stale.
    newest = worker_chat.append_to_state(state, "fact 4", pinned=True)
    spliced = worker_chat.splice(newest, report.state)
    assert spliced.applied and spliced.pinned_dropped == 1
    assert _pinned_kept(spliced.state) == {"fact 1", "fact 2", "fact 3", "fact 4"}
    assert worker_chat.splice(spliced.state, report.state).pinned_dropped == 0  # stale: nothing lands


def test_summariser_round_trips_reach_the_chat_observer() -> None:
    summarizer = ScriptedModel([Reply(text="S1", usage=Usage(40, 5))], provider="sum")
    seen: list[RoundTrip] = []
    chat = Chat(model=ScriptedModel(default="a"), compactor=Summarize(summarizer, keep_last=1, batch=1),
                auto_compact=False, observer=seen.append)
    state: bytes | None = None
    for i in range(4):
        _, state = chat.chat_with_state(state, user=f"q{i}")
    seen.clear()
    report = chat.compact_with_report(state)
    assert report.applied == ("summarize",)
    assert [(r.purpose, r.usage, r.model) for r in seen] == [("summarize", Usage(40, 5), summarizer.model_name)]

    seen.clear()
    auto = Chat(model=ScriptedModel(default="a"), observer=seen.append,
                compactor=Summarize(ScriptedModel(default="S"), keep_last=1, batch=1))
    state = None
    for i in range(4):
        _, state = auto.chat_with_state(state, user=f"q{i}")
    assert [r.purpose for r in seen].count("summarize") >= 1


class _Buggy:
    name = "buggy"

    def should_compact(self, state: ConversationState, counter: TokenCounter) -> bool:
        return True

    def compact(self, state: ConversationState, counter: TokenCounter) -> ConversationState:
        raise KeyError("a bug in a compactor")


def test_a_compactor_bug_is_logged_with_its_stack_and_reported(caplog: pytest.LogCaptureFixture) -> None:
    chat = Chat(model=ScriptedModel(default="a"), compactor=Compose(_Buggy(), KeepLastExchanges(1)),
                auto_compact=False)
    state: bytes | None = None
    for i in range(3):
        _, state = chat.chat_with_state(state, user=f"q{i}")
    with caplog.at_level(logging.ERROR, logger="worker.conversation"):
        report = chat.compact_with_report(state)
    assert report.applied == ("keep_last_exchanges(1)",)
    assert any("buggy" in e and "KeyError" in e for e in report.errors)
    bugs = [r for r in caplog.records if r.levelno >= logging.ERROR and r.exc_info]
    assert bugs and bugs[0].exc_info is not None and bugs[0].exc_info[0] is KeyError

    alone = Chat(model=ScriptedModel(default="a"), compactor=_Buggy(), auto_compact=False)
    report = alone.compact_with_report(state)
    assert not report.changed and report.state == state and report.errors


def test_the_worker_chat_takes_its_pinned_cap_from_parley_max_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    from worker.runtime import build_chat
    from worker.settings import Settings

    monkeypatch.setenv("PARLEY_MAX_PINNED", "7")
    assert build_chat(Settings(), ScriptedModel()).max_pinned == 7
    monkeypatch.delenv("PARLEY_MAX_PINNED")
    assert build_chat(Settings(), ScriptedModel()).max_pinned == Chat(model=ScriptedModel()).max_pinned
