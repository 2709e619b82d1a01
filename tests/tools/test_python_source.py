"""Python tools from PARLEY_TOOLS and from a real installed package's ``parley.tools`` entry point."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.errors import ConfigurationError
from worker.settings import Settings
from worker.tools import fixed_tools

PACKAGE = '''
from worker.conversation import Tool

SCHEMA = {"type": "object", "properties": {"player": {"type": "string"}}}


def inventory(player):
    return {"player": player, "items": ["rope", "lantern"]}


TOOLS = [Tool(name="inventory", description="A player's items.", parameters=SCHEMA, handler=inventory)]


def factory(settings):
    # A factory reads the settings (here the model's name) to build its tools.
    return [Tool(name="model_name", description="The model in use.", parameters={"type": "object"},
                 handler=lambda: settings.llm.model)]


def broken_factory(settings):
    raise RuntimeError("no game database")


NOT_TOOLS = ["inventory"]
'''


@pytest.fixture()
def game_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package ``mygame_tools`` installed into a temp dir on sys.path, with a dist-info carrying its entry
    point, as ``pip install`` would leave it."""
    name = f"mygame_tools_{tmp_path.name.replace('-', '_')}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text(textwrap.dedent(PACKAGE))
    dist = tmp_path / f"{name}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[parley.tools]\nmygame = {name}:factory\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_parley_tools_names_a_list_and_the_entry_point_a_factory(game_package: str) -> None:
    settings = Settings(tools=f"{game_package}:TOOLS", llm_model="gpt-test")
    tools, servers = fixed_tools(settings)
    assert [t.name for t in tools] == ["inventory", "model_name"]
    assert tools[0].handler(player="ann") == {"player": "ann", "items": ["rope", "lantern"]}
    assert tools[1].handler() == "gpt-test"
    assert servers == []


@pytest.mark.parametrize(("reference", "message"), [
    ("no_colon_here", "expected package.module:attribute"),
    ("surely_not_a_module_xyz:TOOLS", "cannot import"),
    ("{pkg}:MISSING", "has no attribute 'MISSING'"),
    ("{pkg}:NOT_TOOLS", "expected a list of worker.conversation.Tool"),
    ("{pkg}:broken_factory", "the tool factory failed: RuntimeError: no game database"),
])
def test_a_bad_reference_is_a_configuration_error_naming_it(game_package: str, reference: str,
                                                             message: str) -> None:
    ref = reference.format(pkg=game_package)
    with pytest.raises(ConfigurationError, match=f"PARLEY_TOOLS={ref}") as err:
        fixed_tools(Settings(tools=ref))
    assert message in str(err.value)


def test_duplicate_names_across_sources_fail_the_start(game_package: str) -> None:
    # PARLEY_TOOLS names the factory the entry point also loads: two tools called model_name
    with pytest.raises(ConfigurationError, match="duplicate tool name 'model_name'"):
        fixed_tools(Settings(tools=f"{game_package}:factory"))
