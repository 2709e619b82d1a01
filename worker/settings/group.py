"""What a settings group is: a small frozen object, built by field name in code and by flat name from the
environment; and the helpers the groups' fields share."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

# populate_by_name: code builds a group by field name (``Redis(url=...)``), the environment by flat name.
GROUP_CONFIG = ConfigDict(populate_by_name=True, extra="forbid")


class Group(BaseModel):
    """A group of settings: frozen, built by field name in code and by flat name from the environment. A model
    rather than a dataclass where nothing needs :func:`dataclasses.replace`, and its validator built on first use
    (``defer_build``; the settings' own validator covers the groups): fifteen classes built at import cost every
    process's start-up about 30 ms more otherwise (bench: import plus the first ``Settings()``)."""

    model_config = ConfigDict(frozen=True, defer_build=True, **GROUP_CONFIG)


STANDARD: dict[str, Any] = {"standard": True}  # a field read from its standard name (REDIS_URL) as well as PARLEY_REDIS_URL


def split_commas(v: object) -> object:
    """``a, b ,,c`` -> ``["a", "b", "c"]``: the comma form a person writes; anything else as it is."""
    if not isinstance(v, str):
        return v
    return [p.strip() for p in v.split(",") if p.strip()]
