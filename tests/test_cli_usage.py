"""The usage the ``parley`` command documents is the usage it accepts."""

from __future__ import annotations

import argparse
import re

import pytest

from worker import cli


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = cli._build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_documented_command_and_option_exists() -> None:
    commands = _subparsers()
    documented = 0
    for line in (cli.__doc__ or "").splitlines():
        for chunk in line.split("|"):
            m = re.match(r"\s*parley (\w+)(.*)", chunk)
            if not m:
                continue
            name, rest = m.group(1), m.group(2).split("  ")[0]
            assert name in commands, f"the docstring documents `parley {name}`, which does not exist"
            options = {o for a in commands[name]._actions for o in a.option_strings}
            for flag in re.findall(r"(--?[a-z][\w-]*)", rest):
                assert flag in options, f"the docstring documents `parley {name} {flag}`, which is not accepted"
            documented += 1
    assert documented >= 10


def test_config_prints_the_markdown_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["config"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| variable | default | meaning |") and "`REDIS_URL`" in out
