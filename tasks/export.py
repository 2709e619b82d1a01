"""The durable record's exporter as a Celery task, for deployments that would rather not run the Procfile's
``exporter`` process: with ``PARLEY_EXPORT_EVERY_SECONDS`` set, Celery beat (``celery -A tasks beat``, or a worker
started with ``-B``) sends ``parley.export_records`` that often, and a worker runs export passes until the streams
are empty. Two such tasks at once are harmless (rows are keyed by record id), only wasteful."""

from __future__ import annotations

import logging
from typing import Any

from tasks import app
from worker.errors import DatabaseUnavailableError, StoreError
from worker.settings import get_settings

log = logging.getLogger("parley.tasks")

_exporter: Any = None


# Beat and running workers know the task by this name, not by its module's: it stays as it is when the code moves.
@app.task(name="parley.export_records", ignore_result=True, acks_late=False)
def export_records() -> int:
    """Export until the record streams are empty; returns the entries written (0 when a pass failed: the entries
    not written stay in the streams, and the next beat tries again)."""
    global _exporter
    settings = get_settings()
    if not settings.record.database_url:
        return 0
    if _exporter is None:
        from worker.durable_record import database
        from worker.durable_record.exporter import Exporter
        from worker.queue.connections import build_store

        url = settings.record.database_url
        _exporter = Exporter(build_store(settings), lambda: database.connect(url), batch=settings.record.exporter_batch)
    try:
        return int(_exporter.export_all())
    except (DatabaseUnavailableError, StoreError) as exc:
        log.warning("export task failed; the next beat tries again", extra={"detail": str(exc)})
        return 0
