"""The README's configuration table is generated from the settings model; it must not drift."""

from __future__ import annotations

import pathlib

from worker.cli import readme_with_table

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_readme_configuration_table_matches_the_settings() -> None:
    text = (ROOT / "README.md").read_text()
    assert readme_with_table(text) == text, "run `parley config --readme README.md`"


def test_readme_names_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert "scripts/demo" in text and "scripts/test" in text
    assert "scripts/test" in (ROOT / ".ci" / "run").read_text()
