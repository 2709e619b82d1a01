"""Compaction strategies, safe boundaries, pinned items, reports and splicing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.conversation.conftest import make_tool
from worker import Chat, Compose, CompressToolExchanges, KeepLastExchanges, ScriptedModel, Summarize, TokenBudget
from worker.conversation import EstimateCounter, Reply, Usage
from worker.conversation.compaction import COMPRESSED_MARK
from worker.conversation.history import exchanges
from worker.conversation.prompt import PINNED_HEADING, SUMMARY_HEADING
from worker.conversation.state import decode_state
from worker.errors import ModelUnavailableError
from worker.testing import check_history


def build(chat: Chat, turns: int, *, start: bytes | None = None, event_every: int = 0, label: str = "question") -> bytes:
    state = start
    for i in range(turns):
        if event_every and i % event_every == 0:
            state = chat.append_to_state(state, f"event {i}", pinned=(i == 0))
        _, state = chat.chat_with_state(state, user=f"{label} {i}")
    assert state is not None
    return state


def test_keep_last_exchanges_keeps_first_user_and_pinned() -> None:
    chat = Chat(model=ScriptedModel(default="answer"), compactor=KeepLastExchanges(3))
    state = build(chat, 10, event_every=4)
    st = decode_state(state)
    assert len(exchanges(st.messages)) <= 4  # three plus the kept first user message
    assert st.messages[0].content == "question 0" and st.messages[0].role == "user"
    assert [m.content for m in st.pinned] == ["event 0"]
    assert st.messages[-1].role == "assistant"
    assert check_history(st.messages) == []
    assert st.meta.compactions > 0 and st.generation > 0


def test_compaction_never_splits_a_tool_pair() -> None:
    script = []
    for _ in range(8):
        script += [Reply(tool_calls=(("lookup", {"place": "p"}), ("lookup", {"place": "q"}))), "done"]
    chat = Chat(model=ScriptedModel(script), tools=[make_tool()], compactor=KeepLastExchanges(2))
    state = build(chat, 8)
    st = decode_state(state)
    assert check_history(st.messages) == []
    ex = exchanges(st.messages)
    for e in ex:
        assert st.messages[e.start].role in ("user", "event", "system")


def test_token_budget_uses_reported_usage_and_trims_to_target() -> None:
    model = ScriptedModel(default=lambda req: Reply(text="answer " * 20, usage=Usage(prompt_tokens=len(req.messages) * 60)))
    chat = Chat(model=model, compactor=TokenBudget(1000, target_tokens=600), auto_compact=False)
    state = build(chat, 12)
    budget = TokenBudget(1000, target_tokens=600)
    counter = EstimateCounter()
    before = decode_state(state)
    assert budget.should_compact(before, counter)
    report = chat.compact_with_report(state)
    assert report.changed and report.tokens_after <= 600 < report.tokens_before
    assert report.messages_after < report.messages_before
    after = decode_state(report.state)
    assert after.last_usage is None  # stale usage would re-trigger at once
    assert not budget.should_compact(after, counter)


def test_token_budget_trims_more_than_one_exchange_when_needed() -> None:
    chat = Chat(model=ScriptedModel(default="a " * 200), compactor=TokenBudget(400), auto_compact=False)
    state = build(chat, 10)
    report = chat.compact_with_report(state)
    assert report.messages_before - report.messages_after >= 4


def test_summarize_updates_the_summary_and_renders_it() -> None:
    summarizer = ScriptedModel(["S1: user asked questions 0-5.", "S2: questions 0-9 and more."], provider="sum")
    chat_model = ScriptedModel(default="answer")
    chat = Chat(model=chat_model, compactor=Summarize(summarizer, keep_last=2, batch=3), auto_compact=False)
    state = build(chat, 6)
    state = chat.compact(state)
    st = decode_state(state)
    assert st.summary == "S1: user asked questions 0-5."
    assert "(none yet)" in summarizer.requests[0].messages[0].content
    assert summarizer.requests[0].purpose == "summarize"
    state = build(chat, 4, start=state, label="later")
    state = chat.compact(state)
    # The second request updates the first summary; it does not start from scratch.
    assert "S1: user asked questions 0-5." in summarizer.requests[1].messages[0].content
    assert "question 0" not in summarizer.requests[1].messages[0].content
    chat.chat_with_state(state, system="Base.", user="next")
    system = chat_model.requests[-1].system or ""
    assert system.startswith("Base.") and SUMMARY_HEADING in system and "S2" in system


@pytest.mark.parametrize("failure", [ModelUnavailableError("down"), "   "])
def test_failed_or_empty_summary_changes_nothing(failure: object) -> None:
    summarizer = ScriptedModel([failure])  # type: ignore[list-item]
    chat = Chat(model=ScriptedModel(default="answer"), compactor=Summarize(summarizer, keep_last=1, batch=1),
                auto_compact=False)
    state = build(chat, 5)
    report = chat.compact_with_report(state)
    assert not report.changed and report.errors
    assert decode_state(report.state).messages == decode_state(state).messages


def test_compress_tool_exchanges() -> None:
    outputs = iter([f"RESULT-{i} " + "data " * 100 for i in range(6)])
    script = []
    for _ in range(6):
        script += [Reply(tool_calls=(("lookup", {"place": "p"}),)), "noted"]
    script += [Reply(tool_calls=(("fail", {}),)), "it failed", "latest"]
    tools = [make_tool(handler=lambda place="": next(outputs)), make_tool("fail", handler=lambda: 1 / 0)]
    chat = Chat(model=ScriptedModel(script), tools=tools, compactor=CompressToolExchanges(keep_recent=2, sample_chars=40),
                auto_compact=False)
    state = build(chat, 8)
    state = chat.compact(state)
    st = decode_state(state)
    tool_msgs = [m for m in st.messages if m.role == "tool"]
    compressed = [m for m in tool_msgs if m.content.startswith(COMPRESSED_MARK)]
    full = [m for m in tool_msgs if not m.content.startswith(COMPRESSED_MARK)]
    assert len(compressed) == 4
    assert "RESULT-0" in compressed[0].content and "lookup" in compressed[0].content
    assert any(m.is_error and "ZeroDivisionError" in m.content for m in full)  # failures stay verbatim
    assert sum(1 for m in full if not m.is_error) == 2
    assert check_history(st.messages) == []


def test_compose_runs_steps_whose_triggers_fire_and_survives_a_failing_step() -> None:
    broken = Summarize(ScriptedModel([ModelUnavailableError("down")]), keep_last=1, batch=1)
    chat = Chat(model=ScriptedModel(default="answer"), compactor=Compose(broken, KeepLastExchanges(2)), auto_compact=False)
    state = build(chat, 6)
    report = chat.compact_with_report(state)
    assert report.changed and report.applied == ("keep_last_exchanges(2)",)
    assert report.errors and "summarize" in report.errors[0]


def test_auto_compact_failure_keeps_the_reply_and_the_state() -> None:
    broken = Summarize(ScriptedModel(default=ModelUnavailableError("down")), keep_last=1, batch=1)
    chat = Chat(model=ScriptedModel(default="answer"), compactor=broken)
    state = build(chat, 3)
    result = chat.run_turn(state, user="still there?")
    assert result.reply == "answer"
    assert len(decode_state(result.state).messages) == 8


def test_needs_compaction_flag_when_auto_compact_is_off() -> None:
    chat = Chat(model=ScriptedModel(default="a"), compactor=KeepLastExchanges(2), auto_compact=False)
    result = chat.run_turn(build(chat, 3), user="y")
    assert result.needs_compaction
    assert chat.needs_compaction(result.state)
    assert not chat.needs_compaction(chat.compact(result.state))


def test_compact_is_correct_when_state_grew_since_the_decision() -> None:
    chat = Chat(model=ScriptedModel(default="a"), compactor=KeepLastExchanges(2), auto_compact=False)
    base = build(chat, 4)
    assert chat.needs_compaction(base)
    grown = build(chat, 3, start=base)
    out = decode_state(chat.compact(grown))
    assert [m.content for m in out.messages if m.role == "user"][-2:] == ["question 1", "question 2"]


def test_splice_keeps_inputs_that_arrived_during_compaction() -> None:
    slow_summary = ScriptedModel(["summary of early turns"])
    chat = Chat(model=ScriptedModel(default="a"), compactor=Summarize(slow_summary, keep_last=1, batch=1),
                auto_compact=False)
    base = build(chat, 4)
    compacted = chat.compact(base)          # computed off to the side...
    newest = build(chat, 2, start=base)     # ...while two more turns were committed
    newest = chat.append_to_state(newest, "User has just tagged Harrogate Theatre")
    result = chat.splice(newest, compacted)
    assert result.applied and result.kept_new_messages == 5
    st = decode_state(result.state)
    assert st.summary == "summary of early turns"
    assert [m.content for m in st.messages[-5:]] == ["question 0", "a", "question 1", "a",
                                                     "User has just tagged Harrogate Theatre"]
    assert st.meta.turns == 6 and st.meta.events == 1
    assert check_history(st.messages) == []
    # Applying the same compaction again is stale: another compaction came first.
    again = chat.splice(result.state, compacted)
    assert not again.applied and again.state == result.state


def test_splice_after_reset_is_refused() -> None:
    chat = Chat(model=ScriptedModel(default="a"), compactor=KeepLastExchanges(1), auto_compact=False,
                reset_phrases=["reset"])
    base = build(chat, 3)
    compacted = chat.compact(base)
    reset_state = chat.run_turn(base, user="reset").state
    result = chat.splice(reset_state, compacted)
    assert not result.applied and "reset" in result.reason


def test_pinned_cap_bounds_growth() -> None:
    chat = Chat(model=ScriptedModel(default="a"), compactor=KeepLastExchanges(1), max_pinned=5)
    state = None
    for i in range(20):
        state = chat.append_to_state(state, f"fact {i}", pinned=True)
        _, state = chat.chat_with_state(state, user=f"q{i}")
    st = decode_state(state)
    assert len(st.pinned) <= 5


def test_pinned_items_render_into_the_preamble() -> None:
    model = ScriptedModel(default="a")
    chat = Chat(model=model, compactor=KeepLastExchanges(1))
    state = chat.append_to_state(None, "Team name is Owls", pinned=True)
    state = build(chat, 4, start=state)
    chat.chat_with_state(state, system="Base.", user="what is our team?")
    system = model.requests[-1].system or ""
    assert PINNED_HEADING in system and "Team name is Owls" in system


def test_invalid_compactor_arguments() -> None:
    with pytest.raises(ValueError):
        KeepLastExchanges(0)
    with pytest.raises(ValueError):
        TokenBudget(100, target_tokens=200)
    assert replace(TokenBudget(100), target_tokens=None).target == 70
