"""``PARLEY_TOOLS=package.module:attribute``: the worker's chat gets a game's Python tools, and a wrong setting is a
clear configuration error at start-up."""

from __future__ import annotations

import pytest

from worker.conversation.scripted import ScriptedModel
from worker.errors import ConfigurationError
from worker.runtime import build_chat, load_python_tools
from worker.settings import Settings


def test_a_list_and_a_factory_are_loaded() -> None:
    assert [t.name for t in load_python_tools(Settings(tools="tests.support.game_tools:TOOLS"))] == ["look"]
    assert [t.name for t in load_python_tools(Settings(tools="tests.support.game_tools:tools"))] == ["give_item"]
    assert load_python_tools(Settings()) == []


def test_the_worker_chat_offers_them_to_the_model() -> None:
    model = ScriptedModel(["hi"])
    chat = build_chat(Settings(tools="tests.support.game_tools:TOOLS"), model)
    chat.run_turn(None, user="hello")
    assert [t.name for t in model.requests[0].tools] == ["look"]


@pytest.mark.parametrize(("spec", "says"), [
    ("tests.support.game_tools", "package.module:attribute"),
    ("tests.support.no_such_module:TOOLS", "cannot import"),
    ("tests.support.game_tools:MISSING", "no attribute"),
    ("tests.support.game_tools:NOT_TOOLS", "list of worker.Tool"),
])
def test_a_wrong_setting_says_what_is_wrong(spec: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        load_python_tools(Settings(tools=spec))
