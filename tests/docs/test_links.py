"""The README and the pages under docs/ point only at what exists: every relative link (and its #anchor), every
repository path they name, and every page is reachable from the README. Each fact lives on one page only."""

from __future__ import annotations

import collections
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_CODE = re.compile(r"`([^`\n]+)`")
# A path as the pages write one: segments of word characters, dots and dashes, at least one slash (`worker/cli/`,
# `scripts/demo`, `worker/ingress/`).
_PATH = re.compile(r"[\w.-]+(?:/[\w.-]+)+/?")
# A file named in prose without backticks: a path with a known extension.
_PROSE_PATH = re.compile(r"(?<![\w/.`:-])((?:[\w.-]+/)+[\w.-]+\.(?:py|md|yaml|yml|toml|json|lua))\b")


def _prose(text: str) -> str:
    """``text`` without its fenced code blocks (shell sessions and snippets name commands, not files)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: pathlib.Path) -> set[str]:
    seen: collections.Counter[str] = collections.Counter()
    anchors = set()
    for line in _prose(page.read_text()).splitlines():
        if m := re.match(r"#{1,6} (.+)", line):
            slug = _slug(m.group(1))
            anchors.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
            seen[slug] += 1
    return anchors


def _looks_like_a_file(path: str) -> bool:
    """A path whose first part is a top-level entry of the repository, or whose last part has an extension (so a
    misspelt `wroker/cli.py` counts); `parley/call_id` (an MCP metadata key) does not."""
    first, last = path.split("/")[0], path.rstrip("/").split("/")[-1]
    return (ROOT / first).exists() or re.search(r"\.[a-z]{1,5}$", last) is not None


def _named_paths(text: str) -> set[str]:
    prose = _LINK.sub("", _prose(text))
    named = {c for c in _CODE.findall(prose) if _PATH.fullmatch(c) and not c.startswith(("..", "/"))}
    return {p for p in named if _looks_like_a_file(p)} | set(_PROSE_PATH.findall(_CODE.sub("", prose)))


def test_every_relative_link_and_anchor_exists() -> None:
    broken = []
    for page in PAGES:
        for target in _LINK.findall(_prose(page.read_text())):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


def test_every_repository_path_a_page_names_exists() -> None:
    missing = [f"{page.name}: {path}" for page in PAGES for path in sorted(_named_paths(page.read_text()))
               if not (ROOT / path).exists()]
    assert not missing, missing


def test_every_docs_page_is_linked_from_the_readme_and_opens_with_a_paragraph() -> None:
    readme = (ROOT / "README.md").read_text()
    for page in PAGES[1:]:
        assert f"(docs/{page.name})" in readme, f"README.md does not link docs/{page.name}"
        blocks = page.read_text().split("\n\n")
        assert blocks[0].startswith("# ") and "\n" not in blocks[0], f"{page.name} does not start with its title"
        assert blocks[1][0].isalpha(), f"{page.name} does not open with a paragraph saying what it is for"


def test_no_line_of_prose_is_kept_on_two_pages() -> None:
    where = collections.defaultdict(set)
    for page in PAGES:
        for line in _prose(page.read_text()).splitlines():
            if len(line) >= 60 and not line.startswith(("|---", "| metric", "| variable")):
                where[line.strip()].add(page.name)
    copies = {line: sorted(pages) for line, pages in where.items() if len(pages) > 1}
    assert not copies, copies
