"""worker.errors is the one module of exceptions: its docstring draws the tree, and every class says when it is
raised."""

from __future__ import annotations

import inspect
import re

from worker import errors

_ROW = re.compile(r"^(?P<indent>[│├└─ ]*)(?P<name>[A-Z]\w+)")


def _drawn_tree() -> dict[str, str]:
    """Each class the docstring's tree draws -> the class drawn as its parent."""
    doc = errors.__doc__ or ""
    drawing = doc.split("The tree::", 1)[1].split("\n\n", 2)[1]
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in drawing.splitlines():
        row = _ROW.match(line.strip("\n")[4:])
        assert row, line
        depth = len(row["indent"])
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[row["name"]] = stack[-1][1] if stack else ""
        stack.append((depth, row["name"]))
    return parents


def test_every_exception_is_drawn_in_the_tree_under_its_first_base() -> None:
    classes = {name: cls for name, cls in vars(errors).items()
               if inspect.isclass(cls) and issubclass(cls, BaseException) and cls.__module__ == errors.__name__}
    drawn = _drawn_tree()
    assert set(drawn) == set(classes)
    for name, cls in classes.items():
        expected = "" if cls is errors.ParleyError else cls.__bases__[0].__name__
        assert drawn[name] == expected, name


def test_every_exception_says_when_it_is_raised() -> None:
    for name, cls in vars(errors).items():
        if inspect.isclass(cls) and issubclass(cls, BaseException) and cls.__module__ == errors.__name__:
            assert (cls.__doc__ or "").startswith("Raised when"), name
