"""Settings read from the environment the way a person writes them."""

from __future__ import annotations

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
