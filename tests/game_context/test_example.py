"""docs/game.md's example works as written: examples/game_context.py serves the context endpoint that
examples/tools.yaml names, and its callable is what PARLEY_CONTEXT=game_context:context loads."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from worker.game_context import CallableContext, HttpContext, load_context_source
from worker.settings import Settings
from worker.tools.manifest import load_manifest

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.fixture()
def example(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import game_context

    yield game_context
    sys.modules.pop("game_context", None)


def test_the_example_endpoint_answers_the_players_context(example: object) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), example.ContextEndpoint)  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        source = HttpContext(f"http://127.0.0.1:{server.server_address[1]}/context", headers={}, timeout=2,
                             max_chars=4000)
        assert source.fetch("447700900123", "wamid.1") == ("Player is 120 m from the target (Harrogate Theatre); "
                                                           "3 of 5 targets tagged.")
        assert source.fetch("someone-else", "wamid.2") is None
    finally:
        server.shutdown()
        server.server_close()


def test_the_example_manifest_and_callable_load(example: object) -> None:
    manifest = load_manifest(EXAMPLES / "tools.yaml")
    assert manifest.context is not None and manifest.context.url.endswith("/context")
    source = load_context_source(Settings(_env_file=None, context="game_context:context"))
    assert isinstance(source, CallableContext)
    assert source.fetch("447700900123", "i").startswith("Player is 120 m from the target")
