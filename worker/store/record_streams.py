"""The durable record's streams in Redis (the record itself, in PostgreSQL, is :mod:`worker.durable_record`): what the
exporter takes from them, and when it may let go of it.

The scripts append (see ``append_record`` in worker/store/lua/include/append_record.lua); this part reads a batch
oldest first, and deletes exactly the entries whose rows the database committed (``XDEL`` by id: entries appended
meanwhile, or a batch another exporter is still writing, are not touched). Reading is not claiming: two exporters on
one stream would write the same rows twice, which the rows' unique keys make harmless, so one exporter per
deployment is enough and more are safe.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from worker.store.answers import RecordBacklog, StreamEntry
from worker.store.core import StoreCore
from worker.store.entry_codec import score_position, stream_position
from worker.store.redis_errors import store_errors


class RecordStreamStore(StoreCore):
    """The exporter's access to the record streams."""

    def record_streams(self) -> list[str]:
        """The streams that hold entries now (on a Cluster, one per slot: the empty ones are skipped)."""
        streams = self.records.streams()
        if len(streams) == 1:
            return streams
        pipe = self._client.pipeline(transaction=False)
        for stream in streams:
            pipe.xlen(stream)
        return [stream for stream, length in zip(streams, pipe.execute(), strict=True) if length]

    @store_errors
    def read_records(self, stream: str, count: int) -> list[StreamEntry]:
        """Up to ``count`` entries of ``stream``, oldest first."""
        out = []
        for eid, fields in self._client.xrange(stream, "-", "+", count=count):
            extra = fields.get(b"x")
            out.append(StreamEntry(bytes(eid), bytes(fields.get(b"id", b"")).decode("utf-8", "replace"),
                                   bytes(fields.get(b"r", b"")), None if extra is None else bytes(extra).decode()))
        return out

    @store_errors
    def pending_deletes(self, limit: int = 1000) -> list[tuple[str, tuple[int, int], float]]:
        """Deletes not yet settled (see :meth:`settle_delete`), oldest first: (conversation id, the stream position
        of the delete record, its score)."""
        deletes = self._client.zrange(self.global_keys.record_deletes, 0, limit - 1, withscores=True)
        return [(bytes(member).decode(), score_position(score), float(score)) for member, score in deletes]

    @store_errors
    def oldest_record(self, cid: str) -> tuple[int, int] | None:
        """The stream position of the oldest entry still waiting in ``cid``'s record stream, if any."""
        first = self._client.xrange(self.records.stream(cid), "-", "+", count=1)
        return stream_position(bytes(first[0][0])) if first else None

    @store_errors
    def settle_delete(self, cid: str, score: float) -> None:
        """The database has erased ``cid`` up to that delete: forget it, unless a newer delete replaced it."""
        self._scripts.zrem_if_score(zset=self.global_keys.record_deletes, member=cid.encode(), score=score)

    @store_errors
    def ack_records(self, stream: str, entry_ids: Sequence[bytes]) -> int:
        """Delete the entries whose rows are committed; returns how many were still there."""
        return int(self._client.xdel(stream, *entry_ids)) if entry_ids else 0

    @store_errors
    def record_backlog(self, streams: Sequence[str] | None = None) -> RecordBacklog:
        """Entries waiting, the oldest one's age and the dropped count, over ``streams`` (default: those that hold
        entries now, found first, which on a Cluster is one more pipelined trip); one pipelined trip."""
        if streams is None:
            streams = self.record_streams()
        pipe = self._client.pipeline(transaction=False)
        for stream in streams:
            pipe.xlen(stream)
            pipe.xrange(stream, "-", "+", count=1)
            pipe.get(self.records.dropped_of(stream))
        answers = pipe.execute() if streams else []
        entries, dropped, oldest = 0, 0, None
        dropping = []
        for i, stream in enumerate(streams):
            length, first, dropped_here = answers[3 * i: 3 * i + 3]
            entries += int(length or 0)
            dropped += int(dropped_here or 0)
            if dropped_here:
                dropping.append(stream)
            if first:
                ms = int(bytes(first[0][0]).split(b"-", 1)[0])
                oldest = ms if oldest is None else min(oldest, ms)
        age = max(0.0, time.time() - oldest / 1000) if oldest is not None else 0.0
        return RecordBacklog(entries, age, dropped, tuple(dropping))
