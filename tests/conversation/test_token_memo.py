"""A turn counts only what it added: the compaction trigger's count of the history is kept with the resident state,
and counting through :class:`PrefixMemoCounter` gives exactly the plain counter's figure while encoding only the
messages the memo does not cover. Before, every turn encoded the whole history again once a worker served more
conversations than the counter's text cache holds (the cache is read round-robin and then always misses)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from worker import Chat, ScriptedModel
from worker.conversation.compaction import Hysteresis, droppable_exchanges, has_droppable_exchange
from worker.conversation.messages import Message
from worker.conversation.resident import Resident
from worker.conversation.state import ConversationState
from worker.conversation.tokens import EstimateCounter, PrefixMemoCounter, UsageCalibratedCounter

ROLES = ("user", "assistant", "tool", "event", "system")


class SpyCounter(EstimateCounter):
    """Counts like the estimate and records every text it was asked to count."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def count_text(self, text: str) -> int:
        self.texts.append(text)
        return super().count_text(text)


def _history(spec: list[tuple[str, str]]) -> tuple[Message, ...]:
    return tuple(Message(role, text, seq=i + 1) for i, (role, text) in enumerate(spec))  # type: ignore[arg-type]


messages_spec = st.lists(st.tuples(st.sampled_from(ROLES), st.text(max_size=30)), max_size=25)


@settings(max_examples=200, deadline=None)
@given(messages_spec, messages_spec, st.integers(0, 30))
def test_the_memo_counts_what_the_plain_counter_counts(first, then, changed) -> None:  # type: ignore[no-untyped-def]
    base = EstimateCounter()
    memo = PrefixMemoCounter(base)
    history = _history(first)
    assert memo.count_messages(history) == base.count_messages(history)
    longer = history + _history(then)
    assert memo.count_messages(longer) == base.count_messages(longer)
    if longer:  # a message replaced by another object (compaction compresses a tool output at the same seq)
        i = changed % len(longer)
        edited = (*longer[:i], replace(longer[i], content=longer[i].content + " compressed"), *longer[i + 1:])
        assert PrefixMemoCounter(base, memo.memo).count_messages(edited) == base.count_messages(edited)


def test_a_history_extended_by_two_messages_encodes_only_those_two() -> None:
    spy = SpyCounter()
    history = _history([("user", f"question {i}") if i % 2 == 0 else ("assistant", f"answer {i}") for i in range(40)])
    memo = PrefixMemoCounter(spy)
    memo.count_messages(history)
    spy.texts.clear()
    later = (*history, Message("user", "new question", seq=41), Message("assistant", "new answer", seq=42))
    again = PrefixMemoCounter(spy, memo.memo)
    assert again.count_messages(later) == EstimateCounter().count_messages(later)
    assert spy.texts == ["new question", "new answer"]
    other = PrefixMemoCounter(SpyCounter(), memo.memo)  # a memo of another counter is not this one's count
    assert other.count_messages(later) == EstimateCounter().count_messages(later)
    assert len(other.base.texts) == len(later)  # type: ignore[attr-defined]


def test_a_calibrated_estimate_is_never_remembered() -> None:
    counter = UsageCalibratedCounter()
    memo = PrefixMemoCounter(counter)
    memo.count_messages(_history([("user", "hello there")]))
    assert memo.memo is None


@settings(max_examples=300, deadline=None)
@given(messages_spec)
def test_the_quick_droppable_check_agrees_with_splitting_the_history(spec) -> None:  # type: ignore[no-untyped-def]
    state = ConversationState(provider="openai", messages=_history(spec))
    assert has_droppable_exchange(state) == bool(droppable_exchanges(state))


def test_a_turn_on_a_resident_counts_only_the_messages_it_added() -> None:
    spy = SpyCounter()
    chat = Chat(model=ScriptedModel(default=lambda r: "answer " + "words " * 10), counter=spy,
                compactor=Hysteresis(1_000_000), clock=lambda: 1000.0)
    state: Resident | bytes | None = None
    blob: bytes | None = None
    for turn in range(6):
        spy.texts.clear()
        result = chat.run_turn(state, user=f"turn {turn} " + "text " * 5)
        state, blob = result.resident, result.state
    assert spy.texts == ["turn 5 " + "text " * 5, "answer " + "words " * 10]
    spy.texts.clear()
    chat.run_turn(blob, user="from the blob")  # no resident (another worker wrote it): the whole history is counted
    assert len(spy.texts) == 14
