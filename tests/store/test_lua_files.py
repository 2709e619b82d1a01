"""The Lua scripts as files (worker/store/lua/): every file loaded and registered, every fragment used once per
script, every signature named in the header and nothing below it reading KEYS or ARGV by position, the codes the
same in Lua and in Python, the Python side's named KEYS/ARGV tuples in the header's order, and the files shipped."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

import fakeredis
import pytest

from worker.store import codes, lua
from worker.store.script_args import SIGNATURES
from worker.store.scripts import Scripts

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "worker" / "store" / "lua"
SCRIPT_FILES = sorted(FOLDER.glob("*.lua"))
FRAGMENT_FILES = sorted((FOLDER / "include").glob("*.lua"))
ELSEWHERE = [ROOT / "worker" / "inlet" / "held.lua", ROOT / "worker" / "inlet" / "read.lua"]  # scripts kept beside their only caller, same house style

_BINDING = re.compile(r"^local ([a-z_][a-z0-9_]*) = (?:(KEYS|ARGV)\[(\d+)\]|tail\((KEYS|ARGV), (\d+)\))$")
_POSITIONAL = re.compile(r"\b(KEYS|ARGV)\b")


def _code(line: str) -> str:
    """The line without its comment (the scripts have no '--' inside strings)."""
    return line.split("--", 1)[0]


def signature(text: str) -> tuple[dict[str, list[str]], list[str], list[str]]:
    """A script file's header: the names bound to KEYS and ARGV in position order (a tail as ``*name``), the header's
    comment lines, and the violations: KEYS/ARGV read outside a binding, or bound out of order."""
    lines = text.splitlines()
    i = 0
    while i < len(lines) and lines[i].startswith("--"):
        i += 1
    comments = lines[:i]
    names: dict[str, list[str]] = {"KEYS": [], "ARGV": []}
    problems: list[str] = []
    while i < len(lines) and (m := _BINDING.match(lines[i])):
        name, plain, index, tail_of, tail_from = m.groups()
        which = plain or tail_of
        bound = names[which]
        if bound and bound[-1].startswith("*"):
            problems.append(f"line {i + 1}: {which} bound after its tail")
        if int(index or tail_from) != len(bound) + 1:
            problems.append(f"line {i + 1}: {which} position {index or tail_from}, expected {len(bound) + 1}")
        bound.append(f"*{name}" if tail_of else name)
        i += 1
    for n, line in enumerate(lines[i:], start=i + 1):
        if _POSITIONAL.search(_code(line)):
            problems.append(f"line {n}: reads KEYS/ARGV below the header: {line.strip()}")
    return names, comments, problems


def test_every_script_file_is_loaded_and_registered() -> None:
    names = {p.stem for p in SCRIPT_FILES}
    assert len(names) == 29 and set(lua.SCRIPTS) == names
    for name in names:
        assert getattr(lua, name.upper()) == lua.SCRIPTS[name] == lua.load(name), name
    registered = {s.script for s in vars(Scripts(fakeredis.FakeRedis())).values() if hasattr(s, "script")}
    assert registered == set(lua.SCRIPTS.values())


def test_every_fragment_is_used_and_comes_in_once_per_script() -> None:
    used: set[str] = set()
    elsewhere = {path.name: lua.resolve(path.read_text()) for path in ELSEWHERE}
    for name, text in {**lua.SCRIPTS, **elsewhere}.items():
        assert "--! include" not in text, name  # resolved
        for fragment in FRAGMENT_FILES:
            # What the fragment defines first (a local function or constant) marks where it came in.
            mark = next(line for line in fragment.read_text().splitlines() if line.startswith("local "))
            n = sum(line == mark for line in text.splitlines())
            assert n <= 1, (name, fragment.stem, n)
            if n:
                used.add(fragment.stem)
    assert used == {p.stem for p in FRAGMENT_FILES}


def test_no_script_reads_keys_or_argv_below_its_header() -> None:
    for path in [*SCRIPT_FILES, *ELSEWHERE]:
        names, comments, problems = signature(path.read_text())
        assert not problems, (path.name, problems)
        header = "\n".join(comments)
        for part in ("-- KEYS:", "-- ARGV:", "-- Returns:"):
            assert part in header or (part == "-- ARGV:" and not names["ARGV"]), (path.name, part)
        assert names["KEYS"] and names["ARGV"], path.name


def test_fragments_read_no_keys_or_argv_at_all() -> None:
    for path in FRAGMENT_FILES:
        assert not [line for line in path.read_text().splitlines() if _POSITIONAL.search(_code(line))], path.name


def test_the_header_check_catches_a_positional_read() -> None:
    """The check above can fail: a body reading KEYS[n], a gap in the positions, a binding after the tail."""
    good = "-- X: y\n-- KEYS: a\n-- ARGV: b\n-- Returns: 1\nlocal a = KEYS[1]\nlocal b = ARGV[1]\n\nreturn a .. b\n"
    assert signature(good)[2] == []
    assert signature(good.replace("return a .. b", "return KEYS[1] .. b"))[2]
    assert signature(good.replace("ARGV[1]", "ARGV[2]"))[2]
    assert signature(good.replace("local b = ARGV[1]", "local r = tail(KEYS, 2)\nlocal b = KEYS[3]"))[2]
    assert signature(good + "local c = ARGV[2]\n")[2]  # a binding below the body's first line is in the body


@pytest.mark.parametrize("script", sorted(SIGNATURES))
def test_the_named_tuples_follow_the_headers(script: str) -> None:
    names, _, _ = signature((FOLDER / f"{script}.lua").read_text())
    for which, tuple_type in zip(("KEYS", "ARGV"), SIGNATURES[script], strict=True):
        if tuple_type is None:
            continue
        fields = list(tuple_type._fields)  # type: ignore[attr-defined]
        assert names[which][: len(fields)] == fields, (script, which)
        assert names[which][len(fields):] in ([], [names[which][-1]]) and all(
            n.startswith("*") for n in names[which][len(fields):]), (script, which)


def test_the_lua_codes_are_the_python_codes() -> None:
    text = (FOLDER / "include" / "codes.lua").read_text()
    lua_codes = {m[1]: int(m[2]) for m in re.finditer(r"^local ([A-Z_]+) = (-?\d+)", text, re.MULTILINE)}
    python_codes = {m.name: int(m) for enum in (codes.Refusal, codes.Idle, codes.AcceptCode) for m in enum}
    assert lua_codes == python_codes


def test_the_refusal_messages_name_what_moved() -> None:
    assert str(codes.refused(-1, cid="c", step="commit")) == "lease on c was taken over; commit refused"
    assert str(codes.refused(-2, cid="c", step="commit", version=7)) == "state of c moved to version 7; commit refused"
    assert str(codes.refused(-3, cid="c", step="commit", item="m1")) == (
        "input m1 of c is no longer at the head of the mailbox")
    assert str(codes.refused(-3, cid="c", lease="delivery of r1")) == "delivery of r1 on c was taken over"
    with pytest.raises(ValueError):
        codes.refused(-9, cid="c")


def test_an_include_comes_in_once_and_a_cycle_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    text = lua.resolve("--! include claim\n--! include head_id\nreturn 1\n")
    assert text.count("local function head_id(") == 1 and text.count("local function claim(") == 1
    assert "--! include" not in text
    fragments = {"a": "--! include b\n", "b": "--! include a\n"}
    monkeypatch.setattr(lua, "_read", lambda folder, name: fragments[name])
    with pytest.raises(ValueError, match="cycle: a -> b -> a"):
        lua.resolve("--! include a\n")


def test_the_lua_files_ship_as_package_data() -> None:
    """Every .lua file matches a package-data pattern of pyproject.toml (a wheel built without them would load no
    script at import)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for path in [*SCRIPT_FILES, *FRAGMENT_FILES, *ELSEWHERE]:
        rel = path.relative_to(ROOT / "worker").as_posix()
        assert any(fnmatch.fnmatchcase(rel, pattern) for pattern in config["worker"]), rel
