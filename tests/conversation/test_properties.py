"""Property tests: whatever happens to a conversation, every request is valid and pinned items survive."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conversation.conftest import make_tool
from worker import Chat, Compose, CompressToolExchanges, KeepLastExchanges, ScriptedModel, Summarize, TokenBudget
from worker.conversation import ModelRequest, Reply
from worker.conversation.state import decode_state
from worker.testing import check_history

step = st.one_of(
    st.tuples(st.just("turn"), st.integers(0, 3), st.booleans()),  # tool rounds, a tool fails
    st.tuples(st.just("event"), st.booleans(), st.just(False)),  # pinned?
    st.tuples(st.just("compact"), st.just(0), st.just(False)),
    st.tuples(st.just("length"), st.just(0), st.just(False)),
)

compactors = st.sampled_from(["keep", "budget", "summary", "tools", "all"])


def make_compactor(kind: str):  # type: ignore[no-untyped-def]
    summarizer = ScriptedModel(default=lambda r: "summary " + str(len(r.messages[0].content)))
    return {
        "keep": KeepLastExchanges(2),
        "budget": TokenBudget(300, target_tokens=150),
        "summary": Summarize(summarizer, keep_last=1, batch=1),
        "tools": CompressToolExchanges(keep_recent=1, sample_chars=10),
        "all": Compose(CompressToolExchanges(keep_recent=1, sample_chars=10), Summarize(summarizer, keep_last=2, batch=1),
                       TokenBudget(400)),
    }[kind]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=1, max_size=25), compactors, st.booleans())
def test_requests_stay_valid_and_pinned_items_survive(steps, kind, auto) -> None:  # type: ignore[no-untyped-def]
    requests: list[ModelRequest] = []
    pending: list[Reply | str] = []

    def respond(request: ModelRequest) -> Reply | str:
        requests.append(request)
        problems = check_history(request.messages)
        assert problems == [], problems
        assert request.messages and request.messages[0].role in ("user", "event", "system")
        return pending.pop(0) if pending else "ok"

    model = ScriptedModel(default=respond)
    tools = [make_tool(), make_tool("broken", handler=lambda: 1 / 0)]
    chat = Chat(model=model, tools=tools, compactor=make_compactor(kind), auto_compact=auto, max_tool_iterations=2)
    state: bytes | None = None
    pinned: set[str] = set()
    for i, (op, n, flag) in enumerate(steps):
        if op == "turn":
            for r in range(n):
                pending.append(Reply(tool_calls=(("broken" if flag and r == 0 else "lookup", {"place": f"p{i}"}),)))
            pending.append(f"answer {i} " + "words " * 20)
            _, state = chat.chat_with_state(state, user=f"user {i} " + "text " * 10)
            pending.clear()
        elif op == "event":
            text = f"event {i}"
            state = chat.append_to_state(state, text, pinned=flag)
            if flag:
                pinned.add(text)
        elif op == "compact" and state is not None:
            state = chat.compact(state)
        elif op == "length":
            pending.append(Reply(tool_calls=(("lookup", {"place": "x"}),), finish_reason="length"))
            _, state = chat.chat_with_state(state, user=f"cut {i}")
            pending.clear()
        if state is not None:
            s = decode_state(state)
            assert check_history(s.messages) == []
            kept = {m.content for m in s.messages if m.pinned} | {m.content for m in s.pinned}
            assert pinned <= kept, pinned - kept
            seqs = [m.seq for m in s.messages]
            assert seqs == sorted(seqs)
    if state is not None:
        chat.chat_with_state(state, user="final")
        final = requests[-1]
        preamble = final.system or ""
        visible = preamble + " ".join(m.content for m in final.messages)
        assert all(p in visible for p in pinned)
