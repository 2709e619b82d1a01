"""The durable record's commands: ``parley db upgrade``, ``parley exporter``, ``parley transcript``,
``parley usage`` (wired into :mod:`worker.cli`)."""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import signal
import sys
from typing import Any

from worker.cli.terminal import for_terminal, json_for_terminal
from worker.errors import ConfigurationError
from worker.settings import Settings, get_settings

# A transcript line's text starts after the time and the role column; a message's later lines are indented to it,
# so none of them can pass for a line of its own (see worker.cli.terminal).
_TEXT_COLUMN = " " * len("2026-01-01 00:00:00  assistant  ")

log = logging.getLogger("parley.exporter")


def _url(settings: Settings) -> str:
    if not settings.record.database_url:
        raise ConfigurationError("PARLEY_DATABASE_URL is not set: the durable record is off")
    return settings.record.database_url


def _conn() -> Any:
    from worker.durable_record import database

    return database.connect(_url(get_settings()))


def cmd_db(args: argparse.Namespace) -> int:
    from worker.durable_record import database

    with _conn() as conn:
        if args.action == "upgrade":
            applied = database.upgrade(conn)
            print(f"applied {', '.join(applied)}" if applied else "the schema is up to date")
            _announce_record(get_settings())
        print(f"schema version {database.schema_version(conn)}")
    return 0


def _announce_record(settings: Settings) -> None:
    """Tell every process through Redis that the deployment keeps a record, so their deletes reach it too (the
    exporter says it again while it runs)."""
    from worker.errors import StoreError
    from worker.queue.connections import build_store

    try:
        build_store(settings).announce_record()
    except StoreError as exc:
        print(f"warning: could not mark the record on in Redis ({exc}); the exporter will", file=sys.stderr)


def _idle_without_database() -> int:
    """``parley exporter`` with the record off: stay up doing nothing (a Procfile runner such as honcho or foreman
    stops the whole formation when any process exits, even with 0) until SIGTERM or Ctrl-C."""
    import threading

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # Said once the handler is in place, so the line also tells a supervisor the process is ready to be stopped.
    log.warning("PARLEY_DATABASE_URL is not set: the durable record is off; the exporter idles until stopped")
    try:
        while not stop.wait(3600):
            pass
    except KeyboardInterrupt:
        pass
    return 0


def cmd_exporter(args: argparse.Namespace) -> int:
    from worker.durable_record import database
    from worker.durable_record.exporter import Exporter
    from worker.queue.connections import build_store

    settings = get_settings()
    if not settings.record.database_url and not args.once:
        return _idle_without_database()
    url = _url(settings)
    store = build_store(settings)
    exporter = Exporter(store, lambda: database.connect(url), batch=settings.record.exporter_batch)
    try:
        if args.once:
            print(f"exported {exporter.export_all()} record entries")
            return 0
        if settings.observability.metrics_port:
            from prometheus_client import start_http_server

            start_http_server(settings.observability.metrics_port)
        stopping: list[bool] = []
        signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
        print("exporter running (SIGTERM or Ctrl-C stops it after the current batch)", file=sys.stderr)
        try:
            exporter.run(idle=settings.record.exporter_idle_seconds, stop=lambda: bool(stopping))
        except KeyboardInterrupt:
            pass
        return 0
    finally:
        exporter.close()


def cmd_transcript(args: argparse.Namespace) -> int:
    from worker.durable_record import database

    with _conn() as conn:
        database.require_schema(conn)
        lines = database.transcript(conn, args.conversation_id)
    if args.json:
        for line in lines:
            fields = {key: value for key, value in line.__dict__.items() if value is not None}
            print(json_for_terminal(fields, default=str))
        return 0
    if not lines:
        print(f"no record of {args.conversation_id}", file=sys.stderr)
        return 1
    for line in lines:
        print(format_line(line))
    return 0


def format_line(line: Any) -> str:
    """One transcript line for people: time, who, what; what players, models and tools wrote is escaped for the
    terminal (:func:`worker.cli.terminal.for_terminal`), its later lines indented under the text column."""
    when = line.at.strftime("%Y-%m-%d %H:%M:%S")
    if line.role == "tool":
        took = f" ({line.tool_ms:.0f} ms)" if line.tool_ms is not None else ""
        call = for_terminal(f"{line.tool}({line.tool_arguments}) -> {line.tool_result}", _TEXT_COLUMN)
        return f"{when}  tool       {call}{took}"
    text = for_terminal(line.text, _TEXT_COLUMN)
    if line.role in ("assistant", "operator"):
        status = f"  [{for_terminal(line.status)}]" if line.status else ""
        return f"{when}  {line.role:<9}  {text}{status}"
    return f"{when}  {for_terminal(line.role):<9}  {text}"


def cmd_usage(args: argparse.Namespace) -> int:
    from worker.durable_record import database

    since = dt.date.fromisoformat(args.since) if args.since else dt.datetime.now(dt.UTC).date() - dt.timedelta(days=7)
    with _conn() as conn:
        database.require_schema(conn)
        rows = database.usage(conn, since, args.conversation)
    print(f"{'day':<10}  {'conversation':<24}  {'turns':>6}  {'prompt':>10}  {'completion':>10}  {'cached':>10}"
          f"  {'total':>10}")
    for row in rows:
        print(f"{row.day.isoformat():<10}  {row.conversation_id:<24}  {row.turns:>6}  {row.prompt_tokens:>10}  "
              f"{row.completion_tokens:>10}  {row.cached_tokens:>10}  {row.total:>10}")
    return 0


def erase_everywhere(cid: str) -> int | None:
    """After ``delete``: erase the conversation from the database at once too (the delete's record entry does it
    again when the exporter reaches it). ``None`` when no database is configured."""
    settings = get_settings()
    if not settings.record.database_url:
        return None
    from worker.durable_record import database

    with _conn() as conn, conn.transaction():
        return database.erase(conn, cid)


def add_parsers(sub: Any) -> None:
    db = sub.add_parser("db", help="the durable record's schema in PostgreSQL (PARLEY_DATABASE_URL)")
    db.add_argument("action", choices=["upgrade", "version"])
    db.set_defaults(fn=cmd_db)
    exporter = sub.add_parser("exporter",
                              help="copy the record streams to PostgreSQL (the Procfile's exporter process)")
    exporter.add_argument("--once", action="store_true", help="export until the streams are empty, then exit")
    exporter.set_defaults(fn=cmd_exporter)
    transcript = sub.add_parser("transcript", help="the whole conversation from PostgreSQL, in order")
    transcript.add_argument("conversation_id")
    transcript.add_argument("--json", action="store_true", help="one JSON object per line")
    transcript.set_defaults(fn=cmd_transcript)
    usage = sub.add_parser("usage", help="tokens per conversation and UTC day, from PostgreSQL")
    usage.add_argument("--since", help="first day (YYYY-MM-DD); default a week ago")
    usage.add_argument("--conversation", help="only this conversation")
    usage.set_defaults(fn=cmd_usage)
