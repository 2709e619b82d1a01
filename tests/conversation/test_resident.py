"""Residents (states kept decoded between turns) change nothing but the cost: the same conversation played from
blobs and from residents writes the same bytes and shows the model the same requests; the incremental encoder,
the incremental history check and the cheap compaction precheck agree with doing it all again."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conversation.conftest import make_tool
from tests.conversation.test_properties import make_compactor, step
from worker import Chat, CompressToolExchanges, ScriptedModel
from worker.conversation import ModelRequest, Reply
from worker.conversation.history import repair_from, repair_history
from worker.conversation.messages import Message, ToolCall
from worker.conversation.resident import Resident
from worker.conversation.state import (
    ConversationState,
    decode_state,
    decode_with_memo,
    encode_with_memo,
)


def _play(steps, kind, use_residents):  # type: ignore[no-untyped-def]
    requests: list[list[Message]] = []
    pending: list[Reply | str] = []

    def respond(request: ModelRequest) -> Reply | str:
        requests.append(list(request.messages))
        return pending.pop(0) if pending else "ok"

    chat = Chat(model=ScriptedModel(default=respond), tools=[make_tool(), make_tool("broken", handler=lambda: 1 / 0)],
                compactor=make_compactor(kind), auto_compact=False, max_tool_iterations=2, clock=lambda: 1000.0)
    state: bytes | Resident | None = None
    blobs: list[bytes] = []
    for i, (op, n, flag) in enumerate(steps):
        if op == "turn":
            for r in range(n):
                pending.append(Reply(tool_calls=(("broken" if flag and r == 0 else "lookup", {"place": f"p{i}"}),)))
            pending.append(f"answer {i} " + "words " * 20)
            result = chat.run_turn(state, user=f"user {i} " + "text " * 10)
            pending.clear()
            blob, resident = result.state, result.resident
        elif op == "event":
            ev = chat.apply_event(state, f"event {i}", pinned=flag)
            blob, resident = ev.state, ev.resident
        else:
            report = chat.compact_with_report(state)
            blob, resident = report.state, None  # a compaction's result comes back as a blob
        blobs.append(blob)
        state = resident if use_residents and resident is not None else blob
    return blobs, requests


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=1, max_size=20), st.sampled_from(["keep", "budget", "tools", "all"]))
def test_residents_write_the_same_states_and_show_the_same_requests(steps, kind) -> None:  # type: ignore[no-untyped-def]
    from_blobs = _play(steps, kind, use_residents=False)
    from_residents = _play(steps, kind, use_residents=True)
    # Epochs are random per fresh state and tool call ids count up across models: compare the rest.
    assert [_plain(decode_state(b).messages) for b in from_blobs[0]] == [
        _plain(decode_state(b).messages) for b in from_residents[0]]
    assert [_plain(r) for r in from_blobs[1]] == [_plain(r) for r in from_residents[1]]


def _plain(history) -> list[tuple[object, ...]]:  # type: ignore[no-untyped-def]
    return [(m.role, m.content, tuple((c.name, c.arguments) for c in m.tool_calls), m.name, m.is_error, m.pinned,
             m.seq) for m in history]


messages = st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool", "event"]), st.integers(0, 2),
                              st.booleans()), max_size=30)


def _history(spec) -> tuple[Message, ...]:  # type: ignore[no-untyped-def]
    out = []
    for i, (role, calls, empty) in enumerate(spec):
        text = "" if empty and role != "tool" else f"{role} {i}"
        if role == "assistant":
            out.append(Message("assistant", text, tool_calls=tuple(ToolCall(f"c{j % 3}", "f", "{}")
                                                                     for j in range(i, i + calls)), seq=i + 1))
        elif role == "tool":
            out.append(Message("tool", text, tool_call_id=f"c{(i + calls) % 3}", name="f", seq=i + 1))
        else:
            out.append(Message(role, text, seq=i + 1))
    return tuple(out)


@settings(max_examples=300, deadline=None)
@given(messages, messages)
def test_repair_from_a_clean_prefix_matches_repairing_it_all(first, then) -> None:  # type: ignore[no-untyped-def]
    prefix = _history(first)
    whole = prefix + tuple(replace(m, seq=m.seq + len(prefix)) for m in _history(then))
    _, _, clean = repair_from(prefix, None)
    assert repair_from(whole, clean)[:2] == repair_history(whole)


@settings(max_examples=200, deadline=None)
@given(messages, st.integers(0, 5))
def test_encoding_with_the_memo_appends_what_was_added(spec, extra) -> None:  # type: ignore[no-untyped-def]
    base = replace(ConversationState.fresh("p", now=1.0), messages=_history(spec), next_seq=len(spec) + 1)
    stored, memo = encode_with_memo(base)
    grown = base.append(*(Message("user", f"more {i} " * 300) for i in range(extra)))  # may cross the zstd limit
    blob, after = encode_with_memo(grown, memo)
    assert blob.startswith(stored) and after.written_from == len(stored) and decode_state(blob) == grown
    assert decode_state(encode_with_memo(grown, decode_with_memo(blob))[0]) == grown  # nothing new: the same blob
    shrunk = replace(grown, messages=grown.messages[1:]) if grown.messages else replace(grown, summary="s")
    # A compaction (the prefix is not the same any more) writes the state whole.
    assert encode_with_memo(shrunk, after) == encode_with_memo(shrunk)


def _targets_reference(c: CompressToolExchanges, state: ConversationState) -> list[int]:
    """The targets as computed before the precheck (cut into exchanges every time)."""
    return c._all_targets(state)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 400), max_size=12), st.integers(0, 5))
def test_the_compaction_precheck_never_hides_a_target(lengths, keep) -> None:  # type: ignore[no-untyped-def]
    msgs: list[Message] = []
    for i, n in enumerate(lengths):
        msgs += [Message("user", f"u{i}"), Message("assistant", "", tool_calls=(ToolCall(f"c{i}", "f", "{}"),)),
                 Message("tool", "x" * n, tool_call_id=f"c{i}", name="f"), Message("assistant", f"a{i}")]
    state = ConversationState.fresh("p").append(*msgs, Message("user", "last"))
    c = CompressToolExchanges(keep_recent=keep, sample_chars=10)
    assert c._targets(state) == _targets_reference(c, state)
