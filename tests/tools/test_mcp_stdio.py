"""MCP servers over stdio: the published ``mcp-server-time`` (and a FastMCP stdio server of the tests') started by
the worker process on first use, through the Chat's tool layer; restarted when killed; gone at shutdown."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.mcp_stdio import ROOT, mcp_server_time
from worker.conversation import Chat, Reply, ScriptedModel, Tool, turn_context
from worker.conversation.messages import ToolCall
from worker.conversation.tools import run_tool
from worker.errors import ConfigurationError
from worker.settings import Settings
from worker.tools import LoadedTools, fixed_tools, load_tools, stop_mcp_processes


def _until(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def _settings(tmp_path: Path, *servers: dict[str, Any]) -> Settings:
    (tmp_path / "tools.json").write_text(json.dumps({"mcp_servers": list(servers)}))
    return Settings(tools_file=str(tmp_path / "tools.json"), tool_timeout=5.0)


def _test_server() -> dict[str, Any]:
    return {"command": sys.executable, "args": ["-m", "tests.support.mcp_stdio"],
            "env": {"PYTHONPATH": "${PARLEY_TEST_ROOT}", "GAME_REGION": "north"}}


def _children(marker: str) -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if marker in " ".join(p.cmdline())]


def _tools(lt: LoadedTools) -> dict[str, Tool]:
    assert lt.mcp is not None
    return {t.name: t for t in lt.mcp.tools()}


def _call(lt: LoadedTools, name: str, **args: object) -> tuple[str, bool]:
    with turn_context("c", "i"):
        m = run_tool(_tools(lt), ToolCall(id="call_1", name=name, arguments=json.dumps(args)), default_timeout=10,
                     max_chars=4000)
    return m.content, m.is_error


@pytest.fixture()
def time_tools(tmp_path: Path) -> Iterator[LoadedTools]:
    lt = load_tools(_settings(tmp_path, mcp_server_time()))
    yield lt
    lt.close()


def test_a_command_entry_offers_the_servers_tools_and_the_chat_gets_its_answer(time_tools: LoadedTools) -> None:
    assert not _children("mcp_server_time")  # started on first use, not at load
    model = ScriptedModel([Reply(tool_calls=(("get_current_time", {"timezone": "Europe/Oslo"}),)), "it is late"])
    assert time_tools.mcp is not None
    chat = Chat(model=model, tool_source=time_tools.mcp.tools)
    assert chat.run_turn(None, system="s", user="what time is it in Oslo?").reply == "it is late"
    assert {t.name for t in model.requests[0].tools} == {"get_current_time", "convert_time"}
    result = model.requests[-1].messages[-1]
    assert result.role == "tool" and not result.is_error
    answer = json.loads(result.content)
    assert answer["timezone"] == "Europe/Oslo" and answer["datetime"].startswith(time.strftime("%Y-", time.gmtime()))
    assert len(_children("mcp_server_time")) == 1


def test_a_killed_server_is_started_again_for_the_next_call(time_tools: LoadedTools) -> None:
    assert not _call(time_tools, "get_current_time", timezone="UTC")[1]
    [first] = _children("mcp_server_time")
    first.send_signal(signal.SIGKILL)
    assert time_tools.mcp is not None
    [server] = time_tools.mcp.servers
    assert _until(lambda: not server.up, 5)  # its stdout closed: seen at once, not at the next call
    text, error = _call(time_tools, "get_current_time", timezone="Asia/Tokyo")
    assert not error, text
    assert json.loads(text)["timezone"] == "Asia/Tokyo"
    [second] = _children("mcp_server_time")
    assert second.pid != first.pid


def test_a_call_in_flight_when_the_server_dies_is_an_error_result_and_the_next_call_works(tmp_path: Path,
                                                                                        monkeypatch: Any) -> None:
    monkeypatch.setenv("PARLEY_TEST_ROOT", str(ROOT))
    lt = load_tools(_settings(tmp_path, _test_server()))
    try:
        pid = int(_call(lt, "pid")[0])
        with ThreadPoolExecutor(1) as pool:
            napping = pool.submit(_call, lt, "nap", seconds=30)
            time.sleep(0.5)
            os.kill(pid, signal.SIGKILL)
            text, error = napping.result(10)
        assert error and "Connection closed" in text, text
        text, error = _call(lt, "pid")
        assert not error and int(text) != pid
    finally:
        lt.close()


def test_shutdown_leaves_no_child(tmp_path: Path) -> None:
    lt = load_tools(_settings(tmp_path, mcp_server_time()))
    assert not _call(lt, "get_current_time", timezone="UTC")[1]
    [child] = _children("mcp_server_time")
    started = time.monotonic()
    stop_mcp_processes()
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    assert not _children("mcp_server_time")
    assert time.monotonic() - started < 5
    lt.close()


def test_the_server_gets_a_minimal_environment_and_its_env_not_the_workers_secrets(tmp_path: Path,
                                                                                 monkeypatch: Any) -> None:
    monkeypatch.setenv("PARLEY_TEST_ROOT", str(ROOT))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("WHATSAPP_ACCESS_TOKEN", "wa-secret")
    lt = load_tools(_settings(tmp_path, _test_server()))
    try:
        text, error = _call(lt, "environment")
        assert not error, text
        env = json.loads(text)
        assert env["GAME_REGION"] == "north" and env["PYTHONPATH"] == str(ROOT)  # ${PARLEY_TEST_ROOT} expanded
        assert set(env) <= {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "PYTHONPATH", "GAME_REGION",
                            "LC_CTYPE"}, env  # LC_CTYPE: Python's own locale coercion
        assert "sk-secret" not in text and "wa-secret" not in text
    finally:
        lt.close()


def test_a_bad_command_or_an_unset_variable_stops_the_start(tmp_path: Path, monkeypatch: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"mcp_servers \(command 'no-such-mcp-server'\): no such executable"):
        fixed_tools(_settings(tmp_path, {"command": "no-such-mcp-server"}))
    monkeypatch.delenv("PARLEY_TEST_ROOT", raising=False)
    with pytest.raises(ConfigurationError, match=r"env 'PYTHONPATH' uses \$\{PARLEY_TEST_ROOT\}, which is not set"):
        fixed_tools(_settings(tmp_path, _test_server()))
    with pytest.raises(ConfigurationError, match=r"mcp_servers.0.command.args"):
        fixed_tools(_settings(tmp_path, {"command": sys.executable, "args": "-m x"}))


def test_a_server_that_keeps_dying_is_started_again_with_a_growing_delay(tmp_path: Path) -> None:
    lt = load_tools(_settings(tmp_path, {"command": sys.executable, "args": ["-c", "import sys; sys.exit(3)"]}))
    try:
        started = time.monotonic()
        assert _tools(lt) == {}  # no tools, and the turn is not held up for the start wait
        assert time.monotonic() - started < 5
        assert lt.mcp is not None
        [server] = lt.mcp.servers
        assert _until(lambda: server.young_deaths >= 5, 20)
        assert time.monotonic() - started >= 3.5  # again at once, then after 0.5 s, 1 s and 2 s: no spin
    finally:
        lt.close()


def _pid_in_child(lt: LoadedTools, out: Any) -> None:
    out.put(int(_call(lt, "pid")[0]))
    stop_mcp_processes()


def test_a_forked_process_starts_its_own_server(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("PARLEY_TEST_ROOT", str(ROOT))
    lt = load_tools(_settings(tmp_path, _test_server()))
    try:
        parent = int(_call(lt, "pid")[0])
        fork = multiprocessing.get_context("fork")
        out = fork.Queue()
        child = fork.Process(target=_pid_in_child, args=(lt, out))
        child.start()
        theirs = out.get(timeout=30)
        child.join(10)
        assert theirs != parent and child.exitcode == 0
        assert psutil.pid_exists(parent) and not psutil.pid_exists(theirs)
        assert int(_call(lt, "pid")[0]) == parent  # the parent's server was not disturbed
    finally:
        lt.close()
