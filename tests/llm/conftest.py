from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.llm.servers import ScriptedServer


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    s = ScriptedServer()
    yield s
    s.stop()
