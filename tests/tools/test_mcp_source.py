"""MCP tools against a real MCP server (the SDK's FastMCP over streamable HTTP, in a subprocess on loopback)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import REGISTRY

from tests.support.mcp_game_server import McpProcess
from worker.conversation import Chat, Reply, ScriptedModel, Tool, turn_context
from worker.conversation.messages import ToolCall
from worker.conversation.tools import run_tool
from worker.settings import Settings
from worker.tools import LoadedTools, idempotency_key, load_tools


def _until(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def _unavailable(url: str) -> float:
    return REGISTRY.get_sample_value("parley_mcp_server_unavailable_total", {"server": url}) or 0.0


@pytest.fixture()
def server() -> Iterator[McpProcess]:
    p = McpProcess().start()
    yield p
    p.stop()


@pytest.fixture()
def loaded(server: McpProcess) -> Iterator[LoadedTools]:
    lt = load_tools(Settings(mcp_servers=server.url, tool_timeout=1.0, mcp_refresh_seconds=60))
    yield lt
    lt.close()


def _turn_tools(lt: LoadedTools) -> dict[str, Tool]:
    assert lt.mcp is not None
    return {t.name: t for t in lt.mcp.tools()}


def _call(tools: dict[str, Tool], name: str, **args: object) -> tuple[str, bool]:
    with turn_context("c", "i"):
        m = run_tool(tools, ToolCall(id="call_1", name=name, arguments=json.dumps(args)), default_timeout=10,
                     max_chars=1000)
    return m.content, m.is_error


def test_tools_are_listed_at_start_and_called(loaded: LoadedTools) -> None:
    tools = _turn_tools(loaded)
    assert set(tools) == {"weather", "unlock", "nap", "whoami", "bearer"}
    assert tools["weather"].parameters["properties"]["city"]["type"] == "string"
    assert _call(tools, "weather", city="Oslo") == ("storm over Oslo", False)
    assert not any(t.game for t in tools.values())  # another party's server: its answers never set the game's facts


def test_a_call_carries_its_ids_and_idempotency_key_in_meta(loaded: LoadedTools) -> None:
    text, error = _call(_turn_tools(loaded), "whoami")
    assert not error
    assert json.loads(text) == {"parley/call_id": "call_1", "parley/conversation_id": "c", "parley/input_id": "i",
                                "parley/idempotency_key": idempotency_key("c", "i", "call_1")}


def test_a_list_changed_notification_refreshes_the_tools(loaded: LoadedTools) -> None:
    assert _call(_turn_tools(loaded), "unlock") == ("unlocked", False)
    # the refresh timer is 60 s: only the notification can bring the new tool this soon
    assert _until(lambda: "secret_door" in _turn_tools(loaded), 5)
    assert _call(_turn_tools(loaded), "secret_door") == ("the door creaks open", False)


def test_a_slow_call_times_out_as_an_error_result(loaded: LoadedTools) -> None:
    started = time.monotonic()
    text, error = _call(_turn_tools(loaded), "nap", seconds=5)
    assert error and "nap" in text
    assert time.monotonic() - started < 4


def test_a_server_that_is_down_gives_no_tools_and_counts_it_then_comes_back(server: McpProcess) -> None:
    lt = load_tools(Settings(mcp_servers=server.url, tool_timeout=1.0, mcp_refresh_seconds=0.5))
    try:
        assert "weather" in _turn_tools(lt)
        server.stop()
        before = _unavailable(server.url)
        assert _until(lambda: _turn_tools(lt) == {}, 10)
        assert _unavailable(server.url) > before
        # a turn goes on without the server's tools
        model = ScriptedModel([Reply(text="fine without tools")])
        assert lt.mcp is not None
        chat = Chat(model=model, tool_source=lt.mcp.tools)
        assert chat.run_turn(None, system="s", user="hi").reply == "fine without tools"
        assert model.requests[-1].tools == []
        back = McpProcess(server.port).start()
        try:
            assert _until(lambda: "weather" in _turn_tools(lt), 15)
        finally:
            back.stop()
    finally:
        lt.close()


def test_a_server_down_at_start_does_not_fail_the_start() -> None:
    dead = McpProcess()
    started = time.monotonic()
    lt = load_tools(Settings(mcp_servers=dead.url), mcp_start_wait=5)
    try:
        assert time.monotonic() - started < 5
        assert _turn_tools(lt) == {}
    finally:
        lt.close()


def test_a_servers_unusable_or_clashing_tools_are_left_out_not_fatal() -> None:
    import mcp.types as mt

    from worker.tools.mcp_source import EventLoopThread, McpServer, McpSource

    bridge = EventLoopThread()
    try:
        servers = [McpServer(f"http://127.0.0.1:9/{i}", headers={}, bridge=bridge, call_timeout=1, refresh_seconds=60)
                   for i in (1, 2)]
        servers[0].listed = [mt.Tool(name="scalar", inputSchema={"type": "string"}),
                             mt.Tool(name="bad name!", inputSchema={"type": "object"}),
                             mt.Tool(name="look", inputSchema={"type": "object"}),
                             mt.Tool(name="ok", inputSchema={})]
        servers[1].listed = [mt.Tool(name="ok", inputSchema={"type": "object"})]
        for s in servers:
            s.up = True
        tools = McpSource(servers, taken=["look"]).tools()
        assert [(t.name, t.parameters) for t in tools] == [("ok", {"type": "object"})]
    finally:
        bridge.stop()
