"""Tool arguments are checked against the tool's JSON schema before anything is called (Python, HTTP and MCP tools
alike): an invalid call is an error result naming the argument, and the handler, the game engine or the MCP server
never sees it. An invalid schema is refused when the tools are loaded."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from tests.support.game_engine import GameEngine
from tests.support.mcp_game_server import McpProcess
from worker.conversation import Chat, Reply, ScriptedModel, Tool, turn_context
from worker.conversation.messages import ToolCall
from worker.conversation.tools import run_tool
from worker.errors import ConfigurationError, ToolError
from worker.settings import Settings
from worker.tools import fixed_tools, load_tools

GIVE = {"type": "object", "properties": {"player": {"type": "string"}, "count": {"type": "integer", "minimum": 1},
                                        "email": {"type": "string", "format": "email"}},
        "required": ["player"], "additionalProperties": False}


def call(tools: dict[str, Tool], name: str, args: Any) -> tuple[str, bool]:
    with turn_context("conv-1", "input-1"):
        m = run_tool(tools, ToolCall(id="call_1", name=name, arguments=json.dumps(args)), default_timeout=10,
                     max_chars=10_000)
    return m.content, m.is_error


@pytest.mark.parametrize(("args", "says"), [
    ({"player": 7}, "argument 'player': 7 is not of type 'string'"),
    ({"player": "ann", "count": 0}, "argument 'count': 0 is less than the minimum of 1"),
    ({"count": 2}, "'player' is a required property"),
    ({"player": "ann", "admin": True}, "('admin' was unexpected)"),
    ({"player": "ann", "email": "not an address"}, "argument 'email': 'not an address' is not a 'email'"),
])
def test_a_python_tool_is_not_called_with_arguments_its_schema_refuses(args: dict[str, Any], says: str) -> None:
    seen: list[dict[str, Any]] = []
    tools = {"give": Tool(name="give", description="d", parameters=GIVE, handler=lambda **a: seen.append(a) or "ok")}
    text, error = call(tools, "give", args)
    assert error and says in text and "invalid arguments for give" in text and "not called" in text
    assert seen == []
    assert call(tools, "give", {"player": "ann", "count": 2}) == ("ok", False)
    assert seen == [{"player": "ann", "count": 2}]


def test_the_model_reads_the_error_and_can_call_again() -> None:
    seen: list[dict[str, Any]] = []
    tool = Tool(name="give", description="d", parameters=GIVE, handler=lambda **a: seen.append(a) or "granted")
    model = ScriptedModel([Reply(tool_calls=(("give", {"player": 1}),)), Reply(tool_calls=(("give", {"player": "x"}),)),
                           Reply(text="done")])
    result = Chat(model=model, tools=[tool]).run_turn(None, user="give")
    assert result.reply == "done" and seen == [{"player": "x"}]
    first_result = model.requests[1].messages[-1]
    assert first_result.is_error and "argument 'player'" in first_result.content


def test_an_invalid_schema_is_refused_when_the_tool_is_made() -> None:
    with pytest.raises(ToolError, match=r"not a valid JSON schema at properties/n/type"):
        Tool(name="bad", description="d", parameters={"type": "object", "properties": {"n": {"type": "numbr"}}},
             handler=lambda **a: a)


@pytest.fixture()
def engine() -> Iterator[GameEngine]:
    e = GameEngine().start()
    yield e
    e.stop()


def manifest(tmp_path: Path, engine: GameEngine, parameters: dict[str, Any]) -> Path:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps({"tools": [{"name": "give", "description": "Give an item", "parameters": parameters,
                                           "url": f"{engine.url}/give"}]}))
    return path


def test_an_http_tool_never_posts_a_call_its_schema_refuses(tmp_path: Path, engine: GameEngine) -> None:
    loaded, _ = fixed_tools(Settings(tools_file=str(manifest(tmp_path, engine, GIVE))))
    tools = {t.name: t for t in loaded}
    text, error = call(tools, "give", {"player": ["ann"]})
    assert error and "argument 'player'" in text
    assert engine.calls == []
    assert call(tools, "give", {"player": "ann"})[1] is False and len(engine.calls) == 1


def test_an_invalid_schema_in_the_manifest_fails_the_start(tmp_path: Path, engine: GameEngine) -> None:
    bad = {"type": "object", "properties": {"player": {"type": "string", "minLength": "one"}}}
    with pytest.raises(ConfigurationError, match=r"tools\.0\.parameters.*minLength"):
        fixed_tools(Settings(tools_file=str(manifest(tmp_path, engine, bad))))


@pytest.fixture()
def mcp_server() -> Iterator[McpProcess]:
    p = McpProcess().start()
    yield p
    p.stop()


def _mcp_calls() -> float:
    return sum(REGISTRY.get_sample_value("parley_tool_calls_total", {"source": "mcp", "outcome": o}) or 0.0
               for o in ("ok", "error_result", "failed", "timeout"))


def test_an_mcp_tool_is_not_called_with_arguments_its_schema_refuses(mcp_server: McpProcess) -> None:
    lt = load_tools(Settings(mcp_servers=mcp_server.url, tool_timeout=5.0, mcp_refresh_seconds=60))
    try:
        assert lt.mcp is not None
        tools = {t.name: t for t in lt.mcp.tools()}
        before = _mcp_calls()
        text, error = call(tools, "weather", {"city": 42})
        assert error and "argument 'city': 42 is not of type 'string'" in text
        assert _mcp_calls() == before  # no request reached the server
        assert call(tools, "weather", {"city": "Harrogate"})[1] is False and _mcp_calls() == before + 1
    finally:
        lt.close()


def test_an_mcp_tool_with_an_invalid_schema_is_left_out_when_listed(caplog: pytest.LogCaptureFixture) -> None:
    import asyncio

    import mcp.types as mt

    from worker.tools.mcp_source import EventLoopThread, McpServer

    class Session:
        async def list_tools(self, cursor: str | None = None) -> mt.ListToolsResult:
            return mt.ListToolsResult(tools=[mt.Tool(name="odd", inputSchema={"type": "object", "required": "x"}),
                                             mt.Tool(name="fine", inputSchema={"type": "object"})])

    bridge = EventLoopThread()
    try:
        server = McpServer("http://127.0.0.1:9/mcp", headers={}, bridge=bridge, call_timeout=1, refresh_seconds=60)
        with caplog.at_level(logging.WARNING, logger="worker.tools.mcp_source"):
            asyncio.run(server._list(Session()))  # type: ignore[arg-type]
        assert [t.name for t in server.listed] == ["fine"]
        assert any("'odd' left out" in r.getMessage() and "not a valid JSON schema" in r.getMessage()
                   for r in caplog.records)
    finally:
        bridge.stop()
