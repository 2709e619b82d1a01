"""The live game context's sources: the manifest's HTTP endpoint (against a real loopback game) and a Python
callable; each answer or failure comes back as text or as a GameContextError with the reason the metrics count."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.game_context import GameContextServer
from worker.errors import ConfigurationError, GameContextError
from worker.game_context import CallableContext, HttpContext, load_context_source, takes_input_id
from worker.settings import Settings


@pytest.fixture()
def game() -> Iterator[GameContextServer]:
    g = GameContextServer().start()
    yield g
    g.stop()


def _http(game: GameContextServer, *, timeout: float = 2.0, max_chars: int = 100, **kw: Any) -> HttpContext:
    return HttpContext(game.endpoint, headers={"Authorization": "Bearer t"}, timeout=timeout, max_chars=max_chars, **kw)


def _reason(fetch: Any) -> str:
    with pytest.raises(GameContextError) as caught:
        fetch()
    return caught.value.reason


def test_the_endpoint_gets_the_ids_and_headers_and_its_system_text_comes_back(game: GameContextServer) -> None:
    game.answers["p1"] = "Player is 120 m from the target."
    assert _http(game).fetch("p1", "wamid.1") == "Player is 120 m from the target."
    headers, body = game.calls[0]
    assert body == {"conversation_id": "p1", "input_id": "wamid.1"}
    assert headers["authorization"] == "Bearer t"


def test_a_null_or_absent_system_is_nothing_this_turn(game: GameContextServer) -> None:
    assert _http(game).fetch("nobody", "i") is None
    game.answers["p1"] = (200, {"other": 1})
    assert _http(game).fetch("p1", "i") is None


@pytest.mark.parametrize(("answer", "reason"), [
    ((500, {"error": "engine exploded"}), "http_error"),
    ((404, {"system": "not this"}), "http_error"),
    ((200, b"<html>maintenance</html>"), "not_json"),
    ((200, ["a list"]), "not_json"),
    ((200, {"system": 42}), "bad_system"),
    ((200, {"system": ["a", "b"]}), "bad_system"),
    ((200, {"system": "x" * 10_000}), "oversize"),  # the body is over what 100 characters may need
])
def test_an_unusable_answer_is_a_failure_with_its_reason(game: GameContextServer, answer: tuple[int, Any],
                                                         reason: str) -> None:
    game.answers["p1"] = answer
    assert _reason(lambda: _http(game, max_chars=100).fetch("p1", "i")) == reason


def test_a_slow_endpoint_times_out(game: GameContextServer) -> None:
    game.delay = 1.0
    assert _reason(lambda: _http(game, timeout=0.2).fetch("p1", "i")) == "timeout"


def test_the_whole_fetch_is_bounded_by_the_timeout_not_each_read(game: GameContextServer) -> None:
    # A clock past the deadline by the first chunk: a trickling answer is abandoned there.
    ticks = iter([0.0, 10.0, 10.0, 10.0])
    game.answers["p1"] = "hello"
    assert _reason(lambda: _http(game, timeout=1.0, clock=lambda: next(ticks)).fetch("p1", "i")) == "timeout"


def test_an_unreachable_endpoint_is_a_failure() -> None:
    dead = GameContextServer().start()
    url = dead.endpoint
    dead.stop()
    source = HttpContext(url, headers={}, timeout=1.0, max_chars=100)
    assert _reason(lambda: source.fetch("p1", "i")) == "unreachable"


def test_a_callable_is_called_with_the_conversation_id_or_with_both_ids() -> None:
    assert CallableContext(lambda cid: f"ctx of {cid}", timeout=1).fetch("p1", "i1") == "ctx of p1"
    assert CallableContext(lambda cid, input_id: f"{cid}/{input_id}", timeout=1).fetch("p1", "i1") == "p1/i1"

    def by_keyword(cid: str, *, input_id: str = "") -> str:
        return input_id

    assert takes_input_id(by_keyword) and CallableContext(by_keyword, timeout=1).fetch("p1", "i1") == "i1"
    assert not takes_input_id(lambda cid, extra=None: "")  # a second parameter with a default is not the input id
    assert CallableContext(lambda cid: None, timeout=1).fetch("p1", "i") is None


def test_a_callable_that_raises_hangs_or_returns_no_text_is_a_failure() -> None:
    release = threading.Event()

    def boom(cid: str) -> str:
        raise KeyError(cid)

    assert _reason(lambda: CallableContext(boom, timeout=1).fetch("p1", "i")) == "error"
    assert _reason(lambda: CallableContext(lambda cid: release.wait(5), timeout=0.1).fetch("p1", "i")) == "timeout"
    release.set()
    assert _reason(lambda: CallableContext(lambda cid: {"system": "x"}, timeout=1).fetch("p1", "i")) == "bad_system"


def test_a_callable_that_calls_sys_exit_is_a_failure_not_the_turns_end() -> None:
    def exits(cid: str) -> str:
        raise SystemExit(2)  # what argparse or click do in the game's code on a bad argument

    assert _reason(lambda: CallableContext(exits, timeout=1).fetch("p1", "i")) == "error"


def _manifest(tmp_path: Path, context: dict[str, Any]) -> str:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps({"tools": [], "context": context}))
    return str(path)


def game_context(cid: str) -> str:
    """PARLEY_CONTEXT's target in the tests below."""
    return f"context of {cid}"


def test_the_settings_name_the_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAME_TOKEN", "s3cret")
    assert load_context_source(Settings(_env_file=None)) is None
    manifest = _manifest(tmp_path, {"url": "http://127.0.0.1:9/context", "timeout": 1.5,
                                    "headers": {"Authorization": "Bearer ${GAME_TOKEN}"}})
    source = load_context_source(Settings(_env_file=None, tools_file=manifest))
    assert isinstance(source, HttpContext)
    assert (source.url, source.timeout, source.headers) == ("http://127.0.0.1:9/context", 1.5,
                                                            {"Authorization": "Bearer s3cret"})
    by_ref = load_context_source(Settings(_env_file=None, context=f"{__name__}:game_context", context_timeout=0.5))
    assert isinstance(by_ref, CallableContext) and by_ref.timeout == 0.5 and by_ref.fetch("p9", "i") == "context of p9"


@pytest.mark.parametrize(("settings", "named"), [
    ({"context": f"{__name__}:nothing_here"}, "PARLEY_CONTEXT"),
    ({"context": f"{__name__}:CONSTANT"}, "expected a callable"),
    ({"context": f"{__name__}:async_context"}, "an async function"),
    ({"context": f"{__name__}:game_context", "context_timeout": 10.0}, "PARLEY_LEASE_SECONDS"),
])
def test_a_bad_setting_fails_the_start_naming_it(settings: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        load_context_source(Settings(_env_file=None, **settings))


CONSTANT = "not callable"


async def async_context(cid: str) -> str:
    """An async PARLEY_CONTEXT: refused at the start (on a thread it would hand back a coroutine each turn)."""
    return cid


def test_a_manifest_context_and_parley_context_together_are_refused(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, {"url": "http://127.0.0.1:9/context"})
    with pytest.raises(ConfigurationError, match="set one of the two"):
        load_context_source(Settings(_env_file=None, tools_file=manifest, context=f"{__name__}:game_context"))
    with pytest.raises(ConfigurationError, match="PARLEY_LEASE_SECONDS"):
        load_context_source(Settings(_env_file=None, tools_file=_manifest(tmp_path, {"url": "http://h/c",
                                                                                      "timeout": 30})))
    with pytest.raises(ConfigurationError, match="context"):
        load_context_source(Settings(_env_file=None, tools_file=_manifest(tmp_path, {"url": "ftp://h/c"})))
