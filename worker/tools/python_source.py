"""Python tools: ``PARLEY_TOOLS=package.module:attribute`` and the ``parley.tools`` entry-point group.

A game ships its tools as its own package; the worker imports them by name, so nothing in Parley changes. The
attribute (or entry point) is a list of :class:`~worker.conversation.tools.Tool`, or a factory called with the
settings that returns one (a factory can read its own configuration or open its own clients).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from worker.conversation.tools import Tool
from worker.errors import ConfigurationError

GROUP = "parley.tools"


def _as_tools(value: Any, settings: Any, where: str) -> list[Tool]:
    """A list of Tools as it is; a callable is called with the settings first."""
    if callable(value) and not isinstance(value, Tool):
        try:
            value = value(settings) if _takes_an_argument(value) else value()
        except ConfigurationError:
            raise
        except Exception as exc:
            raise ConfigurationError(f"{where}: the tool factory failed: {type(exc).__name__}: {exc}") from exc
    if isinstance(value, Tool):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, Tool) for t in value):
        raise ConfigurationError(f"{where}: expected a list of worker.conversation.Tool or a factory returning "
                                 f"one, got {type(value).__name__}")
    return list(value)


def _takes_an_argument(fn: Callable[..., Any]) -> bool:
    try:
        return len(inspect.signature(fn).parameters) > 0
    except (TypeError, ValueError):  # a builtin without a signature: pass the settings
        return True


def load_reference(reference: str, settings: Any) -> list[Tool]:
    """The tools named by ``package.module:attribute`` (``attribute`` may be dotted)."""
    where = f"PARLEY_TOOLS={reference}"
    return _as_tools(import_reference(reference, where), settings, where)


def import_reference(reference: str, where: str) -> Any:
    """The object ``package.module:attribute`` names (``attribute`` may be dotted); a
    :class:`~worker.errors.ConfigurationError` naming ``where`` when there is none."""
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError(f"{where}: expected package.module:attribute")
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"{where}: cannot import {module_name!r}: {exc}") from exc
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise ConfigurationError(f"{where}: {module_name!r} has no attribute {attribute!r}")
        value = getattr(value, part)
    return value


def load_entry_points(settings: Any) -> list[Tool]:
    """The tools of every installed package's ``parley.tools`` entry point, in entry-point name order."""
    tools: list[Tool] = []
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        where = f"entry point {GROUP}:{ep.name} ({ep.value})"
        try:
            value = ep.load()
        except Exception as exc:
            raise ConfigurationError(f"{where}: cannot load it: {type(exc).__name__}: {exc}") from exc
        tools.extend(_as_tools(value, settings, where))
    return tools
