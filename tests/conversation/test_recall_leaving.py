"""What leaves the verbatim history is reported by every path that removes it, exactly once, and a Chat with an
archive receives it."""

from __future__ import annotations

import hashlib
from dataclasses import replace

from tests.conversation.conftest import Clock
from worker.conversation.chat import Chat
from worker.conversation.compaction import CompressToolExchanges, TokenBudget
from worker.conversation.messages import Message, ToolCall
from worker.conversation.recall.archive import InMemoryArchive
from worker.conversation.recall.leaving import archived, departed, speaker_of
from worker.conversation.scripted import ScriptedModel
from worker.conversation.state import ConversationState, decode_state, encode_state


def _talk(chat: Chat, turns: int, state: bytes | None = None) -> bytes:
    for i in range(turns):
        state = chat.run_turn(state, user=f"question number {i} about lanterns " + "x" * 200).state
    assert state is not None
    return state


def _noise(seed: str) -> str:
    return "".join(hashlib.sha256(f"{seed}-{j}".encode()).hexdigest() for j in range(6))


def _texts(messages: tuple[Message, ...]) -> list[str]:
    return [m.content for m in messages]


def test_a_compaction_reports_exactly_the_messages_it_dropped() -> None:
    chat = Chat(model=ScriptedModel(), auto_compact=False, compactor=TokenBudget(400, 200))
    state = _talk(chat, 6)
    before = decode_state(state)
    report = chat.compact_with_report(state)
    after = decode_state(report.state)
    assert report.changed and report.archived == len(report.departed) > 0
    kept = {m.seq for m in after.messages}
    assert [m.seq for m in report.departed] == [m.seq for m in before.messages if m.seq not in kept]


def test_an_applied_splice_reports_what_left_and_a_stale_one_nothing() -> None:
    chat = Chat(model=ScriptedModel(), auto_compact=False, compactor=TokenBudget(400, 200))
    state = _talk(chat, 6)
    report = chat.compact_with_report(state)
    newer = chat.run_turn(state, user="one more").state
    spliced = chat.splice(newer, report.state)
    assert spliced.applied
    assert [m.seq for m in spliced.departed] == [m.seq for m in report.departed]
    again = chat.splice(spliced.state, report.state)  # the same compaction again: stale
    assert not again.applied and again.departed == ()


def test_the_turn_s_own_compaction_and_the_size_bound_report_what_they_dropped() -> None:
    chat = Chat(model=ScriptedModel(), compactor=TokenBudget(400, 200))
    state = _talk(Chat(model=ScriptedModel()), 8)
    result = chat.run_turn(state, user="and now?")
    gone = {m.seq for m in decode_state(state).messages} - {m.seq for m in decode_state(result.state).messages}
    assert gone and {m.seq for m in result.departed} == gone
    small = Chat(model=ScriptedModel(), max_state_bytes=1500)
    state = None
    for i in range(3):  # words that do not compress
        state = small.run_turn(state, user=_noise(str(i))).state
    result = small.run_turn(state, user=_noise("last"))
    gone = {m.seq for m in decode_state(state).messages} - {m.seq for m in decode_state(result.state).messages}
    assert gone and {m.seq for m in result.departed} >= gone


def test_a_compressed_tool_output_is_archived_whole_and_once() -> None:
    call = ToolCall(id="c1", name="lookup", arguments='{"q": "lantern"}')
    st = ConversationState.fresh("scripted").append(
        Message(role="user", content="find it"), Message(role="assistant", tool_calls=(call,)),
        Message(role="tool", content="L" * 900, tool_call_id="c1", name="lookup"),
        Message(role="assistant", content="found"), Message(role="user", content="thanks"),
        Message(role="assistant", content="welcome"))
    chat = Chat(model=ScriptedModel(), auto_compact=False, compactor=CompressToolExchanges(keep_recent=0))
    report = chat.compact_with_report(encode_state(st))
    assert _texts(report.departed) == ["L" * 900]
    # The note that stands for it, dropped later, is not archived again.
    later = decode_state(report.state)
    assert departed(later, replace(later, messages=later.messages[-2:])) == later.messages[:1] + later.messages[1:2] + \
        later.messages[3:4]


def test_an_idle_reset_archives_the_old_history_but_not_what_it_carries_over(clock: Clock) -> None:
    chat = Chat(model=ScriptedModel(), idle_gap_seconds=60, clock=clock)
    state = chat.run_turn(None, user="my secret plan").state
    clock.advance(3600)
    state = chat.apply_event(state, "the game said this meanwhile").state
    result = chat.run_turn(state, user="back again")
    assert result.reset == "idle_gap"
    assert [speaker_of(m) for m in result.departed] == ["player", "assistant"]
    assert result.departed[0].content == "my secret plan"


def test_a_chat_with_an_archive_receives_what_compaction_drops_and_a_reset_phrase_erases_it() -> None:
    archive = InMemoryArchive()
    chat = Chat(model=ScriptedModel(), compactor=TokenBudget(400, 200), archive=archive, conversation_id="c1",
                reset_phrases=("start over",))
    state = _talk(chat, 8)
    # The first player message always stays; the ones after it left.
    found = archive.search("c1", "question number 2", max_tokens=2000)
    assert found and "question number 2 " in found[0]["text"]
    # Archiving the same messages again (a retried write) adds nothing.
    ids = archived("c1", chat.compact_with_report(state).departed)
    assert archive.append("c1", ids) == ids  # new ones
    assert archive.append("c1", ids) == []
    chat.run_turn(state, user="start over")
    assert archive.search("c1", "question", max_tokens=2000) == []


def test_without_an_archive_nothing_changes() -> None:
    plain = Chat(model=ScriptedModel(), compactor=TokenBudget(400, 200))
    assert plain.archive is None
    assert _talk(plain, 3)


def test_what_the_archive_s_own_search_answered_is_not_archived_again() -> None:
    """A search_conversation result is a copy of archived messages: archived again, every later search would find
    its copies too. A game tool's call and result are archived as any message is."""
    leaving = (
        Message("user", "what was our team called?", seq=1),
        Message("assistant", "", tool_calls=(ToolCall("s1", "search_conversation", '{"query": "team name"}'),
                                             ToolCall("g1", "tag_place", '{"place": "Harrogate Theatre"}')), seq=2),
        Message("tool", '{"results": [{"text": "we are the Owls"}]}', tool_call_id="s1", seq=3),
        Message("tool", '{"tagged": "Harrogate Theatre"}', tool_call_id="g1", seq=4),
        Message("assistant", "You are the Owls.", seq=5),
    )
    texts = [a.text for a in archived("c", leaving)]
    assert texts == ["what was our team called?", '[called tag_place({"place": "Harrogate Theatre"})]',
                     '{"tagged": "Harrogate Theatre"}', "You are the Owls."]
