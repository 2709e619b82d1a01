"""The durable record's schema: plain versioned SQL files (``NNNN_name.sql``), applied in order by
``parley db upgrade`` (see :func:`worker.durable_record.database.upgrade`), each in the transaction that records it in
``parley_schema``. A migration is never edited once released: a change is a new file."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

_NAME = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    """Every migration shipped with this Parley, oldest first."""
    out = []
    for entry in resources.files(__name__).iterdir():
        found = _NAME.fullmatch(entry.name)
        if found:
            out.append(Migration(int(found.group(1)), found.group(2), entry.read_text(encoding="utf-8")))
    out.sort(key=lambda migration: migration.version)
    if [migration.version for migration in out] != list(range(1, len(out) + 1)):
        raise RuntimeError(f"migrations are not numbered 1..n: {[migration.version for migration in out]}")
    return out
