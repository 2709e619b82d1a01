"""Settings read from the environment the way a person writes them."""

from __future__ import annotations

import pathlib

import pytest

from worker.errors import ConfigurationError
from worker.settings import Settings


@pytest.mark.parametrize(("raw", "expected"), [
    ("start over, reset", ["start over", "reset"]),
    ("reset", ["reset"]),
    (" start over ,, new topic ,", ["start over", "new topic"]),
    ('["start over", "new topic, please"]', ["start over", "new topic, please"]),
    ("", []),
])
def test_reset_phrases_accept_the_comma_form_and_json(monkeypatch: pytest.MonkeyPatch, raw: str,
                                                      expected: list[str]) -> None:
    monkeypatch.setenv("PARLEY_RESET_PHRASES", raw)
    assert Settings(_env_file=None).memory.reset_phrases == expected  # type: ignore[call-arg]


def test_reset_phrases_given_in_code() -> None:
    assert Settings(_env_file=None, reset_phrases=["a", "b"]).memory.reset_phrases == ["a", "b"]  # type: ignore[call-arg]
    assert Settings(_env_file=None, reset_phrases="a, b").memory.reset_phrases == ["a", "b"]  # type: ignore[call-arg,arg-type]


@pytest.mark.parametrize("raw", ['["unterminated', "[1, 2]"])
def test_reset_phrases_that_look_like_json_but_are_not_a_list_of_texts_are_refused(monkeypatch: pytest.MonkeyPatch,
                                                                                    raw: str) -> None:
    monkeypatch.setenv("PARLEY_RESET_PHRASES", raw)
    with pytest.raises((ValueError, ConfigurationError)):
        Settings(_env_file=None)  # type: ignore[call-arg]


def test_a_bad_value_is_reported_under_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_BURST_MAX_MESSAGES", "many")
    with pytest.raises(ValueError, match="PARLEY_BURST_MAX_MESSAGES") as caught:
        Settings(_env_file=None)  # type: ignore[call-arg]
    assert "burst.max_messages" not in str(caught.value)


def test_a_setting_reaches_its_group_from_the_environment_a_flat_name_or_a_group(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from worker.settings import Burst

    monkeypatch.setenv("PARLEY_LEASE_SECONDS", "2.5")
    monkeypatch.setenv("PARLEY_WHATSAPP_ACCESS_TOKEN", "tok")
    s = Settings(_env_file=None, burst_quiet_seconds=0.5, double_text="merge")  # type: ignore[call-arg]
    assert (s.drain.lease_seconds, s.drain.lease_ms) == (2.5, 2500)
    assert s.whatsapp.access_token is not None and s.whatsapp.access_token.get_secret_value() == "tok"
    assert (s.burst.quiet, s.burst.merge, s.burst.peek) == (0.5, True, 19)
    given = Settings(_env_file=None, burst=Burst(quiet_seconds=0), burst_max_messages=3)  # type: ignore[call-arg]
    assert (given.burst.quiet, given.burst.max_messages, given.burst.peek) == (0.0, 3, 0)


def test_each_unit_a_component_reads_is_the_groups_property() -> None:
    s = Settings(_env_file=None, idle_ttl_seconds=1.5, status_webhooks=False, database_url="postgresql://db/p")  # type: ignore[call-arg]
    assert (s.store.idle_ttl_ms, s.store.dedupe_ms, s.store.tombstone_ms) == (1500, 345_600_000, 172_800_000)
    assert (s.delivery.statuses, s.record.enabled, s.record.stream_limit) == (False, True, 100_000)
    bare = Settings(_env_file=None)  # type: ignore[call-arg]
    assert (bare.store.idle_ttl_ms, bare.delivery.statuses, bare.record.stream_limit) == (0, None, 0)


def test_a_tool_factory_reading_a_setting_by_its_flat_name_still_gets_it_with_a_warning() -> None:
    """Before the groups, a PARLEY_TOOLS factory read ``settings.llm_model``; it still works, and says the new path."""
    settings = Settings(_env_file=None, llm_model="gpt-4o-mini", burst_quiet_seconds=2.5)
    with pytest.warns(DeprecationWarning, match=r"settings\.llm\.model"):
        assert settings.llm_model == "gpt-4o-mini"  # type: ignore[attr-defined]
    with pytest.warns(DeprecationWarning):
        assert settings.burst_quiet_seconds == 2.5  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        settings.no_such_setting  # type: ignore[attr-defined]  # noqa: B018


def test_the_system_prompt_comes_from_its_file_when_one_is_named(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: pathlib.Path) -> None:
    """A game's prompt runs to many lines: PARLEY_SYSTEM_PROMPT_FILE names a file (the config folder's) whose text
    every turn gets, in place of PARLEY_SYSTEM_PROMPT; a file that cannot be read is a clear error at start."""
    from worker.runtime import service_config

    prompt = tmp_path / "system_prompt.txt"
    prompt.write_text("You are the quiz master of Harrogate.\nAsk one question at a time.\n", encoding="utf-8")
    monkeypatch.setenv("PARLEY_SYSTEM_PROMPT_FILE", str(prompt))
    assert service_config(Settings(_env_file=None)).system_prompt == (
        "You are the quiz master of Harrogate.\nAsk one question at a time.")
    monkeypatch.setenv("PARLEY_SYSTEM_PROMPT_FILE", str(tmp_path / "missing.txt"))
    with pytest.raises(ConfigurationError, match="PARLEY_SYSTEM_PROMPT_FILE"):
        service_config(Settings(_env_file=None))
    (tmp_path / "empty.txt").write_text("\n")
    monkeypatch.setenv("PARLEY_SYSTEM_PROMPT_FILE", str(tmp_path / "empty.txt"))
    with pytest.raises(ConfigurationError, match="is empty"):
        service_config(Settings(_env_file=None))
