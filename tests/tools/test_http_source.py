"""HTTP tools from a manifest, against a real loopback game engine."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.game_engine import GameEngine
from worker.conversation import Tool, turn_context
from worker.conversation.messages import ToolCall
from worker.conversation.tools import run_tool
from worker.errors import ConfigurationError
from worker.settings import Settings
from worker.tools import fixed_tools, idempotency_key
from worker.tools.manifest import load_manifest

OBJECT = {"type": "object", "properties": {"player": {"type": "string"}, "item": {"type": "string"}}}


@pytest.fixture()
def engine() -> Iterator[GameEngine]:
    e = GameEngine(slow_seconds=2.0).start()
    yield e
    e.stop()


def _manifest(tmp_path: Path, engine: GameEngine, **extra: Any) -> Path:
    tools = [{"name": n, "description": f"{n} tool", "parameters": OBJECT, "url": f"{engine.url}/{n}", **extra}
             for n in ("look", "give", "slow", "broken", "refuse", "html", "tag")]
    tools[0]["headers"] = {"Authorization": "Bearer ${GAME_TOKEN}"}
    tools[2]["timeout"] = 0.5
    path = tmp_path / "tools.json"
    path.write_text(json.dumps({"tools": tools}))
    return path


@pytest.fixture()
def tools(tmp_path: Path, engine: GameEngine, monkeypatch: pytest.MonkeyPatch) -> dict[str, Tool]:
    monkeypatch.setenv("GAME_TOKEN", "s3cret")
    loaded, _ = fixed_tools(Settings(tools_file=str(_manifest(tmp_path, engine))))
    return {t.name: t for t in loaded}


def _call(tools: dict[str, Tool], name: str, call_id: str = "call_1", **args: Any) -> tuple[str, bool]:
    with turn_context("conv-1", "input-1"):
        m = run_tool(tools, ToolCall(id=call_id, name=name, arguments=json.dumps(args)), default_timeout=10,
                     max_chars=10_000)
    return m.content, m.is_error


def test_a_call_posts_the_ids_and_arguments_with_an_idempotency_key(tools: dict[str, Tool],
                                                                    engine: GameEngine) -> None:
    text, error = _call(tools, "look", player="ann")
    assert not error
    assert json.loads(text) == {"room": "the Rusty Anchor tavern", "player": "ann"}
    path, headers, body = engine.calls[0]
    assert path == "/look"
    assert body == {"conversation_id": "conv-1", "input_id": "input-1", "call_id": "call_1",
                    "arguments": {"player": "ann"}}
    assert headers["authorization"] == "Bearer s3cret"
    assert headers["idempotency-key"] == idempotency_key("conv-1", "input-1", "call_1")


def test_the_key_is_the_same_on_a_retry_and_differs_between_calls(tools: dict[str, Tool],
                                                                   engine: GameEngine) -> None:
    _call(tools, "give", "call_1", item="sword")
    _call(tools, "give", "call_1", item="sword")  # the retried turn's same call
    _call(tools, "give", "call_2", item="sword")
    keys = [h["idempotency-key"] for _, h, _ in engine.calls]
    assert keys[0] == keys[1] != keys[2]
    assert len(keys[0]) == 64 and int(keys[0], 16) >= 0
    assert idempotency_key("a", "b", "c") != idempotency_key("a", "bc", "")


def test_an_answer_with_facts_sets_them_and_the_model_reads_the_rest(tools: dict[str, Tool]) -> None:
    with turn_context("conv-1", "input-1"):
        m = run_tool(tools, ToolCall(id="call_1", name="tag", arguments='{"item": "Harrogate Theatre"}'),
                     default_timeout=10, max_chars=10_000)
    assert not m.is_error and json.loads(m.content) == {"tagged": "Harrogate Theatre", "points": 10}
    assert m.facts == (("target", "The player's current target is Harrogate Theatre"),)


@pytest.mark.parametrize(("name", "expected"), [
    ("slow", "did not answer within 0.5 s"),
    ("broken", "answered HTTP 500: {\"error\": \"engine exploded\"}"),
    ("refuse", "answered HTTP 404"),
    ("html", "not JSON"),
])
def test_failures_become_error_results_the_model_reads(tools: dict[str, Tool], name: str, expected: str) -> None:
    text, error = _call(tools, name)
    assert error
    assert expected in text


def test_an_engine_that_is_down_is_an_error_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = GameEngine().start()
    dead.stop()
    monkeypatch.setenv("GAME_TOKEN", "x")
    loaded, _ = fixed_tools(Settings(tools_file=str(_manifest(tmp_path, dead))))
    text, error = _call({t.name: t for t in loaded}, "give")
    assert error and "unreachable" in text


@pytest.mark.parametrize(("content", "suffix", "message"), [
    ('{"tools": [{"name": "x", "description": "d", "parameters": {"type": "object"}}]}', ".json",
     "tools.0.url: Field required"),
    ('{"tools": [{"name": "bad name", "description": "d", "parameters": {"type": "object"}, '
     '"url": "http://h/x"}]}', ".json", "tools.0.name"),
    ("tools:\n  - name: x\n    description: d\n    parameters: {type: string}\n    url: http://h/x\n", ".yaml",
     "tools.0.parameters: Value error, must be a JSON schema with type 'object'"),
    ("tools:\n  - name: x\n    description: d\n    parameters: {type: object}\n    url: ftp://h/x\n", ".yaml",
     "tools.0.url"),
    ('{"tools": [], "mcp_server": []}', ".json", "mcp_server: Extra inputs are not permitted"),
    ('{"tools": [', ".json", "not valid JSON"),
    ("tools: [\n", ".yaml", "not valid YAML"),
    ("tools:\n  - {name: a, description: d, parameters: {type: object}, url: 'http://h/a'}\n"
     "  - {name: a, description: d, parameters: {type: object}, url: 'http://h/b'}\n", ".yml", "duplicate name(s) a"),
    ("tools:\n  - {name: a, description: d, parameters: {type: object}, url: 'http://h/a', timeout: 0}\n", ".yml",
     "tools.0.timeout"),
])
def test_a_bad_manifest_names_the_file_and_the_field(tmp_path: Path, content: str, suffix: str,
                                                     message: str) -> None:
    path = tmp_path / f"tools{suffix}"
    path.write_text(content)
    with pytest.raises(ConfigurationError) as err:
        fixed_tools(Settings(tools_file=str(path)))
    assert str(path) in str(err.value)
    assert message in str(err.value)


def test_a_missing_file_or_header_variable_is_a_configuration_error(tmp_path: Path, engine: GameEngine,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match="cannot read it"):
        fixed_tools(Settings(tools_file=str(tmp_path / "nope.yaml")))
    monkeypatch.delenv("GAME_TOKEN", raising=False)
    with pytest.raises(ConfigurationError, match=r"tools.0.headers: header 'Authorization' uses \$\{GAME_TOKEN\}"):
        fixed_tools(Settings(tools_file=str(_manifest(tmp_path, engine))))


def test_the_example_manifest_loads() -> None:
    manifest = load_manifest(Path(__file__).parents[2] / "examples" / "tools.yaml")
    assert {t.name for t in manifest.tools} >= {"look_around", "give_item"}
    assert manifest.mcp_servers
