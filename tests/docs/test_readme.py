"""The README names the two commands and stays short; the configuration page's table is generated from the settings
model and must not drift."""

from __future__ import annotations

import pathlib

import pytest

from worker.cli import main, page_with_table

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIGURATION = ROOT / "docs" / "configuration.md"


def test_configuration_table_matches_the_settings() -> None:
    text = CONFIGURATION.read_text()
    assert page_with_table(text) == text, "run `parley config --readme docs/configuration.md`"


def test_parley_config_refreshes_the_configuration_page(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = CONFIGURATION.read_text()
    start = text.index("| `REDIS_URL` |")
    stale = tmp_path / "configuration.md"
    stale.write_text(text[:start] + "| `PARLEY_GONE` | `1` | a setting that no longer exists |\n" + text[start:])
    assert main(["config", "--readme", str(stale)]) == 0
    assert stale.read_text() == text
    assert str(stale) in capsys.readouterr().out


def test_readme_names_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert "scripts/demo" in text and "scripts/test" in text
    assert "scripts/test" in (ROOT / ".ci" / "run").read_text()


def test_readme_reads_in_ten_minutes() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move detail to a page under docs/"
