"""docs/recall.md's library example runs as written and prints what its comments say; the page's settings table
names every recall setting the settings model has, with its default."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

from worker.settings.model import Memory
from worker.settings.store import Store

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "recall.md").read_text()
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_PRINTED = re.compile(r"^print\(.*\)\s+# (.+)$", re.M)


def test_the_library_example_prints_what_its_comments_say() -> None:
    (code,) = _BLOCK.findall(PAGE)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/recall.md", "exec"), {})
    expected = [comment.strip() for comment in _PRINTED.findall(code)]
    assert expected == ["player said: I am allergic to peanuts", "['search_conversation']"]
    assert out.getvalue().splitlines() == expected


def test_the_settings_table_names_each_recall_setting_with_its_default() -> None:
    fields = {**Memory.model_fields, **Store.model_fields}
    for name in ("recall", "recall_max_tokens", "recall_max_bytes"):
        default = fields[name].default
        shown = "unset" if default is None else f"`{default}`"
        assert f"| `PARLEY_{name.upper()}` | {shown} |" in PAGE, name
