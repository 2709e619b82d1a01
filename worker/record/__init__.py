"""The durable record: what every turn, event, delivery, status and delete did, kept in PostgreSQL for audit,
analytics and deletion requests, outside the turn's path.

The Redis scripts append one compact entry per change to a capped stream (:mod:`worker.record.entries` builds
them; pure, no I/O); the exporter (:mod:`worker.record.exporter`) copies batches of them to PostgreSQL
(:mod:`worker.record.database`, schema in :mod:`worker.record.migrations`) idempotently and trims the stream only
after the rows are committed.
"""
