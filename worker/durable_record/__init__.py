"""The durable record: what every turn, event, delivery, status and delete did, kept in PostgreSQL for audit,
analytics and deletion requests, outside the turn's path.

The Redis scripts append one compact entry per change to a capped stream (:mod:`worker.durable_record.entries` builds
them; pure, no I/O); the exporter (:mod:`worker.durable_record.exporter`) copies batches of them to PostgreSQL
(:mod:`worker.durable_record.database`, schema in :mod:`worker.durable_record.migrations`) idempotently and trims the stream only
after the rows are committed.
"""
