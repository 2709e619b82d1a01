"""The exporter: moves the record streams' entries into PostgreSQL, in batches, without losing or doubling any.

One pass, per stream that holds entries: read the oldest ``batch`` entries, turn them into rows, write the rows in
one transaction, commit, and only then delete those entries from the stream (by id). A crash anywhere leaves the
entries in the stream; the next pass writes them again and the rows' unique keys make that change nothing. So the
exporter may be killed at any moment, and two of them at once are harmless (each row lands once).

Run it as the Procfile's ``exporter`` process (``parley exporter``), or ``parley exporter --once`` from cron or a
Celery beat entry. Its lag, backlog and the entries the stream cap dropped are Prometheus gauges.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from worker import metrics
from worker.durable_record import database
from worker.durable_record.entries import to_rows
from worker.errors import DatabaseUnavailableError, StoreError
from worker.store.answers import StreamEntry
from worker.store.entry_codec import stream_position
from worker.store.record_streams import RecordStreamStore

log = logging.getLogger("parley.exporter")

#: How often a running exporter says again in Redis that the record is on (a Redis that lost the key, restored
#: from an older snapshot, learns it again within this).
ANNOUNCE_EVERY_S = 60.0


@dataclass(frozen=True)
class Pass:
    """What one pass did: entries written (and trimmed), unreadable ones among them, streams read."""

    exported: int
    unreadable: int
    streams: int


class Exporter:
    """Copies record entries from ``store``'s streams to the database ``connect()`` opens."""

    def __init__(self, store: RecordStreamStore, connect: Callable[[], Any], *, batch: int = 500) -> None:
        self.store, self._connect, self.batch = store, connect, batch
        self._conn: Any = None
        # Streams whose cap has dropped entries: their counters stay in the dropped gauge after the exporter has
        # emptied them (on a Cluster, an empty stream is not among those a pass looks at).
        self._dropping: set[str] = set()
        self._announced = -ANNOUNCE_EVERY_S

    def _db(self) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
            database.require_schema(self._conn)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def export_once(self) -> Pass:
        """One pass over every stream, until each is empty or has given one full batch (so no stream starves the
        others); raises :class:`DatabaseUnavailableError` or :class:`StoreError` with the streams as they were."""
        exported = unreadable = 0
        self._announce()
        streams = self.store.record_streams()
        for stream in streams:
            entries = self.store.read_records(stream, self.batch)
            if entries:
                written, bad = self._write(stream, entries)
                exported, unreadable = exported + written, unreadable + bad
        self._erase_deletes()
        self.observe(streams)
        return Pass(exported, unreadable, len(streams))

    def _erase_deletes(self) -> None:
        """Erase each conversation deleted since the last pass once everything its stream held from before the
        delete was written (the delete's own record erased it already, unless the stream's cap dropped that
        record: an exporter down too long must not leave a deleted transcript in the database)."""
        for cid, position, score in self.store.pending_deletes():
            oldest = self.store.oldest_record(cid)
            if oldest is not None and oldest <= position:
                continue  # older entries of that stream still wait: written first, by a later pass
            conn = self._db()
            try:
                with conn.transaction():
                    database.erase(conn, cid, before=position)
            except DatabaseUnavailableError:
                self.close()
                raise
            self.store.settle_delete(cid, score)

    def _announce(self) -> None:
        """Deletes from processes without a database read this (see ``ConversationStore.delete``)."""
        now = time.monotonic()
        if now - self._announced >= ANNOUNCE_EVERY_S:
            self.store.announce_record()
            self._announced = now

    def export_all(self) -> int:
        """Passes until the streams are empty (what ``--once``, cron or a beat entry wants from one call); returns
        the entries written."""
        total = 0
        while written := self.export_once().exported:
            total += written
        return total

    def _write(self, stream: str, entries: list[StreamEntry]) -> tuple[int, int]:
        rows = to_rows((e.record_id, stream_position(e.entry_id), e.raw, e.extra) for e in entries)
        conn = self._db()
        try:
            with conn.transaction():
                database.write(conn, rows)
        except DatabaseUnavailableError:
            self.close()  # a broken connection is opened anew next time
            raise
        # Committed: now, and only now, the entries may leave the stream.
        self.store.ack_records(stream, [e.entry_id for e in entries])
        metrics.RECORDS_EXPORTED.inc(len(entries))
        if rows.unreadable:
            metrics.RECORDS_UNREADABLE.inc(rows.unreadable)
            log.warning("record entries did not decode; kept raw", extra={"count": rows.unreadable})
        return len(entries), rows.unreadable

    def observe(self, streams: Sequence[str] | None = None) -> None:
        """Set the backlog, lag and dropped gauges from ``streams`` (default: those holding entries now) and the
        streams known to have dropped entries."""
        look = self.store.record_streams() if streams is None else streams
        backlog = self.store.record_backlog(sorted({*look, *self._dropping}))
        self._dropping.update(backlog.dropping)
        metrics.RECORD_BACKLOG.set(backlog.entries)
        metrics.RECORD_LAG.set(backlog.oldest_age_s)
        metrics.RECORD_DROPPED.set(backlog.dropped)

    def run(self, *, idle: float = 0.5, stop: Callable[[], bool] = lambda: False) -> None:
        """Pass after pass until ``stop()``: at once while there is work, ``idle`` seconds apart when there is
        none, backing off (up to 30 s) while the database or Redis is unavailable."""
        failures = 0
        while not stop():
            try:
                done = self.export_once()
                failures = 0
            except (DatabaseUnavailableError, StoreError) as exc:
                failures += 1
                what = "database" if isinstance(exc, DatabaseUnavailableError) else "redis"
                metrics.EXPORT_ERRORS.labels(what).inc()
                log.warning("export pass failed; retrying", extra={"what": what, "detail": str(exc)})
                time.sleep(min(30.0, idle * 2 ** min(failures, 6)))
                continue
            if done.exported == 0:
                time.sleep(idle)

