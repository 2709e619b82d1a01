"""PostgreSQL for the durable record (psycopg 3): the schema's migrations, the exporter's idempotent writes, and
the queries behind ``parley transcript`` and ``parley usage``.

Only the exporter and the command line connect; no turn ever waits on the database. Every write is keyed by the
record's unique id (``ON CONFLICT DO NOTHING``), so a batch written twice (an exporter that died between the commit
and trimming the stream) leaves the same rows.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from worker.durable_record.entries import Rows
from worker.durable_record.migrations import migrations
from worker.errors import ConfigurationError, DatabaseUnavailableError, RecordError

try:
    import psycopg
except ImportError:  # pragma: no cover - an install without the postgres extra
    psycopg = None  # type: ignore[assignment]

# pg_advisory_xact_lock key for migrations: two `parley db upgrade` at once (two containers starting) run one
# after the other, and the second finds nothing to do.
_MIGRATION_LOCK = 0x7061726C6579  # "parley"


def connect(url: str) -> Any:
    """A connection to ``url``; raises :class:`ConfigurationError` without psycopg and
    :class:`DatabaseUnavailableError` when the server cannot be reached."""
    if psycopg is None:
        raise ConfigurationError("PARLEY_DATABASE_URL needs psycopg: pip install 'parley[postgres]'")
    try:
        # Autocommit: a read never leaves a transaction open (so no read needs a rollback); writes group themselves
        # with conn.transaction().
        return psycopg.connect(url, connect_timeout=5, autocommit=True)
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailableError(f"cannot reach the record database: {exc}".strip()) from exc


@contextmanager
def errors() -> Iterator[None]:
    """Map psycopg's errors to Parley's: an unreachable server is retryable, a refused statement is not."""
    assert psycopg is not None
    try:
        yield
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailableError(f"record database: {exc}".strip()) from exc
    except psycopg.Error as exc:
        raise RecordError(f"record database refused: {exc}".strip()) from exc


def schema_version(conn: Any) -> int:
    """The newest migration applied (0: none, or no schema at all)."""
    with errors():
        exists = conn.execute("SELECT to_regclass('parley_schema') IS NOT NULL").fetchone()[0]
        if not exists:
            return 0
        return int(conn.execute("SELECT coalesce(max(version), 0) FROM parley_schema").fetchone()[0])


def upgrade(conn: Any) -> list[str]:
    """Apply the migrations the database lacks, in order, under an advisory lock; returns the ones applied.
    Raises :class:`RecordError` when the database's schema is newer than this Parley knows."""
    known = migrations()
    applied: list[str] = []
    with errors(), conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute("CREATE TABLE IF NOT EXISTS parley_schema (version integer PRIMARY KEY, name text NOT NULL,"
                     " applied_at timestamptz NOT NULL DEFAULT now())")
        have = {int(r[0]) for r in conn.execute("SELECT version FROM parley_schema")}
        if have and max(have) > len(known):
            raise RecordError(f"the record database is at schema {max(have)}; this Parley knows up to "
                              f"{len(known)}: upgrade Parley")
        for m in known:
            if m.version in have:
                continue
            conn.execute(m.sql)
            conn.execute("INSERT INTO parley_schema (version, name) VALUES (%s, %s)", (m.version, m.name))
            applied.append(f"{m.version:04d}_{m.name}")
    return applied


def require_schema(conn: Any) -> None:
    """Raise :class:`RecordError` unless ``parley db upgrade`` brought the schema to this Parley's."""
    have, want = schema_version(conn), len(migrations())
    if have < want:
        raise RecordError(f"the record database is at schema {have}, this Parley needs {want}: run `parley db upgrade`")


def _ts(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


def write(conn: Any, rows: Rows) -> None:
    """Write one batch's rows in the caller's transaction: inserts keyed by record id, then each delete, in the
    stream's order (a conversation deleted in the batch loses what the batch brought before its delete too)."""
    with errors():
        start = 0
        for cid, rid, position in rows.deletes:
            end = next(i for i, r in enumerate(rows.records) if r[0] == rid)
            _insert(conn, rows.records[start:end], rows)
            erase(conn, cid, before=position)
            start = end + 1
        _insert(conn, rows.records[start:], rows)
        for cid, (ms, seq) in rows.erased:  # the archive as it was before the erase (what came after stays)
            conn.execute("DELETE FROM archived_messages a USING records r WHERE a.record_id = r.record_id"
                         " AND a.conversation_id = %s AND (r.stream_ms, r.stream_seq) < (%s, %s)", (cid, ms, seq))


def _insert(conn: Any, records: Sequence[tuple[Any, ...]], rows: Rows) -> None:
    if not records:
        return
    ids = {r[0] for r in records}
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO records (record_id, conversation_id, stream_ms, stream_seq, at, kind, body)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (record_id) DO NOTHING",
            [(rid, cid, ms, seq, _ts(ms / 1000), kind, json.dumps(body, ensure_ascii=False, default=str))
             for rid, cid, ms, seq, kind, body in records])
        msgs = [m for m in rows.messages if m[0] in ids]
        if msgs:
            cur.executemany(
                "INSERT INTO messages (record_id, seq, conversation_id, at, role, input_id, reply_id, part, text, tool,"
                " tool_arguments, tool_result, tool_ms) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (record_id, seq) DO NOTHING",
                [(m[0], m[1], m[2], _ts(m[3] / 1000), *m[4:]) for m in msgs])
        archived = [(*a[:6], None if a[6] is None else _ts(a[6])) for a in rows.archived if a[0] in ids]
        if archived:
            cur.executemany(
                "INSERT INTO archived_messages (record_id, seq, conversation_id, message_id, speaker, text, at)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (record_id, seq) DO NOTHING", archived)
        usage = []
        for usage_row in rows.usage:
            if usage_row[0] in ids:
                at = _ts(usage_row[2] / 1000)
                usage.append((usage_row[0], usage_row[1], at, at.date(), *usage_row[3:]))
        if usage:
            cur.executemany(
                "INSERT INTO usage (record_id, conversation_id, at, day, model, prompt_tokens, completion_tokens,"
                " cached_tokens, cache_write_tokens) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (record_id) DO NOTHING", usage)
        spans: dict[str, tuple[int, int]] = {}
        for _, cid, ms, _, kind, _ in records:
            if kind in ("unreadable", "delete"):
                continue
            lo, hi = spans.get(cid, (ms, ms))
            spans[cid] = (min(lo, ms), max(hi, ms))
        if spans:
            cur.executemany(
                "INSERT INTO conversations (conversation_id, first_at, last_at) VALUES (%s, %s, %s)"
                " ON CONFLICT (conversation_id) DO UPDATE SET first_at = least(conversations.first_at,"
                " excluded.first_at), last_at = greatest(conversations.last_at, excluded.last_at)",
                [(cid, _ts(lo / 1000), _ts(hi / 1000)) for cid, (lo, hi) in spans.items()])


def erase(conn: Any, cid: str, *, before: tuple[int, int] | None = None) -> int:
    """Delete the conversation's rows (those recorded before stream position ``before``, when given: what came
    after a delete is a new conversation under the same id). Returns the records deleted."""
    with errors():
        if before is None:
            deleted = conn.execute("DELETE FROM records WHERE conversation_id = %s", (cid,)).rowcount
            conn.execute("DELETE FROM conversations WHERE conversation_id = %s", (cid,))
            return int(deleted)
        deleted = conn.execute("DELETE FROM records WHERE conversation_id = %s AND (stream_ms, stream_seq) < (%s, %s)",
                         (cid, *before)).rowcount
        left = conn.execute("SELECT min(at), max(at) FROM records WHERE conversation_id = %s", (cid,)).fetchone()
        if left[0] is None:
            conn.execute("DELETE FROM conversations WHERE conversation_id = %s", (cid,))
        else:
            conn.execute("UPDATE conversations SET first_at = %s, last_at = %s WHERE conversation_id = %s",
                         (left[0], left[1], cid))
        return int(deleted)


@dataclass(frozen=True)
class Line:
    """One line of a transcript."""

    at: dt.datetime
    role: str
    text: str
    input_id: str | None = None
    reply_id: str | None = None
    part: int | None = None
    tool: str | None = None
    tool_arguments: str | None = None
    tool_result: str | None = None
    tool_ms: float | None = None
    status: str | None = None  # a reply part's latest delivery status, when one was recorded


_RANK = {"sent": 1, "delivered": 2, "read": 3, "failed": 4}


def transcript(conn: Any, cid: str) -> list[Line]:
    """The conversation in order: inputs, tool calls and reply parts, each part with its latest status."""
    with errors():
        rows = conn.execute(
            # An operator's words are stored as the assistant's rows of an ``operator`` record: shown as theirs.
            "SELECT m.at, CASE WHEN r.kind = 'operator' THEN 'operator' ELSE m.role END, m.text, m.input_id, m.reply_id, m.part, m.tool, m.tool_arguments, m.tool_result,"
            " m.tool_ms FROM messages m JOIN records r USING (record_id) WHERE m.conversation_id = %s"
            " ORDER BY r.stream_ms, r.stream_seq, m.seq", (cid,)).fetchall()
        events = conn.execute(
            "SELECT kind, body FROM records WHERE conversation_id = %s AND kind IN ('sent', 'status', 'failed')"
            " ORDER BY stream_ms, stream_seq", (cid,)).fetchall()
    ids: dict[tuple[str, int], str] = {}  # (reply id, part) -> provider message id
    best: dict[str, str] = {}  # provider message id -> latest status
    failed: set[str] = set()
    for kind, body in events:
        if kind == "sent":
            for part, pid in enumerate(body.get("provider_ids") or ()):
                ids[(body.get("reply_id"), part)] = pid
        elif kind == "status":
            pid, status_name = body.get("provider_id"), body.get("status")
            if _RANK.get(status_name, 0) > _RANK.get(best.get(pid, ""), -1):
                best[pid] = status_name
        elif kind == "failed":
            failed.add(body.get("reply_id"))
    out = []
    for row in rows:
        line = Line(*row)
        if line.role in ("assistant", "operator") and line.reply_id is not None:
            pid = ids.get((line.reply_id, line.part or 0))
            status = best.get(pid) if pid else None
            if status is None:
                status = "failed" if line.reply_id in failed else ("sent" if pid else None)
            line = replace(line, status=status)
        out.append(line)
    return out


@dataclass(frozen=True)
class UsageRow:
    conversation_id: str
    day: dt.date
    turns: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def usage(conn: Any, since: dt.date, conversation_id: str | None = None) -> list[UsageRow]:
    """Tokens per conversation and UTC day from ``since`` on: its turns' and its compactions' (the summariser's);
    ``turns`` counts the player's turns only (not the ``event_turn`` ones that answered a game event)."""
    with errors():
        rows = conn.execute(
            "SELECT u.conversation_id, u.day, count(*) FILTER (WHERE r.kind = 'turn'), sum(u.prompt_tokens),"
            " sum(u.completion_tokens), sum(u.cached_tokens) FROM usage u JOIN records r USING (record_id)"
            " WHERE u.day >= %s AND (%s::text IS NULL OR u.conversation_id = %s)"
            " GROUP BY u.conversation_id, u.day ORDER BY u.day, u.conversation_id",
            (since, conversation_id, conversation_id)).fetchall()
    return [UsageRow(r[0], r[1], int(r[2]), int(r[3]), int(r[4]), int(r[5])) for r in rows]
