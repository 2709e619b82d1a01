from __future__ import annotations

from collections.abc import Callable

import pytest

from worker import Tool


class Clock:
    """A clock tests move by hand."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make_tool(name: str = "lookup", handler: Callable[..., object] | None = None, **kw: object) -> Tool:
    return Tool(
        name=name,
        description=f"{name} tool",
        parameters={"type": "object", "properties": {"place": {"type": "string"}}},
        handler=handler or (lambda place="": {"place": place, "opened": 1900}),
        **kw,  # type: ignore[arg-type]
    )
