"""The core's tool-call context: handlers see the conversation, input and call ids of the call they serve."""

from __future__ import annotations

import threading

import pytest

from worker.conversation import Chat, Reply, ScriptedModel, Tool, ToolCallContext, current_call, turn_context
from worker.conversation.messages import ToolCall
from worker.conversation.tools import run_tool
from worker.errors import ToolError

SCHEMA = {"type": "object", "properties": {}}


def _seen_tool(seen: list[ToolCallContext]) -> Tool:
    return Tool(name="who", description="records its call", parameters=SCHEMA,
                handler=lambda: seen.append(current_call()) or "ok")


def test_the_loop_sets_the_call_id_and_the_service_the_turn_ids() -> None:
    seen: list[ToolCallContext] = []
    model = ScriptedModel([Reply(tool_calls=(("who", {}), ("who", {}))), Reply(text="done")])
    chat = Chat(model=model, tools=[_seen_tool(seen)])
    with turn_context("conv-7", "in-3"):
        assert chat.run_turn(None, system="s", user="hi").reply == "done"
    asked = [c.id for c in model.requests[-1].messages[-3].tool_calls]
    assert len(set(asked)) == 2
    assert sorted(seen, key=lambda c: c.call_id) == sorted(
        (ToolCallContext("conv-7", "in-3", i) for i in asked), key=lambda c: c.call_id)


def test_turns_on_other_threads_do_not_see_each_others_ids() -> None:
    seen: dict[str, ToolCallContext] = {}
    barrier = threading.Barrier(2)

    def handler() -> str:
        barrier.wait(5)  # both handlers run at once
        ctx = current_call()
        seen[ctx.conversation_id] = ctx
        return "ok"

    tools = {"who": Tool(name="who", description="d", parameters=SCHEMA, handler=handler)}

    def turn(cid: str) -> None:
        with turn_context(cid, f"input-of-{cid}"):
            run_tool(tools, ToolCall(id=f"call-of-{cid}", name="who", arguments="{}"), default_timeout=5,
                     max_chars=100)

    threads = [threading.Thread(target=turn, args=(c,)) for c in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {c: ToolCallContext(c, f"input-of-{c}", f"call-of-{c}") for c in ("a", "b")}


def test_outside_a_turn_the_ids_are_empty_and_outside_a_handler_it_raises() -> None:
    seen: list[ToolCallContext] = []
    run_tool({"who": _seen_tool(seen)}, ToolCall(id="c9", name="who", arguments="{}"), default_timeout=5,
             max_chars=100)
    assert seen == [ToolCallContext("", "", "c9")]
    with pytest.raises(ToolError, match="inside a tool handler"):
        current_call()


def test_a_per_turn_tool_source_adds_tools_for_that_turn_only() -> None:
    offered: list[list[str]] = []
    extra: list[Tool] = [Tool(name="extra", description="d", parameters=SCHEMA, handler=lambda: "x")]

    class Recording(ScriptedModel):
        def complete(self, request):  # type: ignore[no-untyped-def]
            offered.append([t.name for t in request.tools])
            return super().complete(request)

    base = Tool(name="base", description="d", parameters=SCHEMA, handler=lambda: "b")
    chat = Chat(model=Recording([Reply(text="one"), Reply(text="two")]), tools=[base], tool_source=lambda: extra)
    chat.run_turn(None, system="s", user="1")
    extra.clear()
    chat.run_turn(None, system="s", user="2")
    assert offered == [["base", "extra"], ["base"]]
