"""The drain's writes: the commit script that applies (or dead-letters) the head input, and what goes with it.

A commit removes the input, records its id as applied and writes the state, the reply, the trace and the record
entry in one step, refusing a stale token; it runs inside the beat's ``committing`` (the heartbeat held off, and
stopped when the commit gave the lease up; see :class:`~worker.service.heartbeat.Beat`). A state the commit wrote is
kept decoded for the conversation's next turn; a state the turn could not use is set aside first (quarantined).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import msgpack

from worker import metrics
from worker.conversation.messages import Message
from worker.conversation.resident import Resident, ResidentCache
from worker.durable_record import entries
from worker.envelopes.inputs import Envelope
from worker.observability import tracing
from worker.service.config import ServiceConfig
from worker.service.drain.archiving import archive_of, archived_trace, record_rows
from worker.service.drain.outcomes import Quarantine
from worker.service.drain.run import DrainRun
from worker.store.answers import CommitResult, Snapshot
from worker.store.interfaces import DrainStore
from worker.store.script_args import NO_ARCHIVE, ArchiveWrite

log = logging.getLogger("parley.service")


class Committer:
    """Writes one drain's outcomes to the store (shared by the drainer's threads, like the applier)."""

    def __init__(self, store: DrainStore, config: ServiceConfig, residents: ResidentCache) -> None:
        self.store, self.config, self.residents = store, config, residents

    def commit(self, run: DrainRun, version: int, env: Envelope, new_state: bytes | None, reply: bytes | None,
               trace: dict[str, Any], *, claim_delivery: bool = False, also: Sequence[str] = (),
               resident: Resident | None = None, record: bytes | None = None, tokens: int = 0,
               departed: Sequence[Message] = (), erase: bool = False) -> CommitResult:
        """Apply ``env`` (and ``also``). ``resident``: ``new_state`` decoded, kept for the next turn when the commit
        lands; ``record``: the durable record's entry (see :class:`~worker.service.drain.recording.Recorder`);
        ``claim_delivery``: when the commit ends the drain, it also takes the delivery lease and claims the reply;
        ``departed``: the messages ``new_state`` no longer holds, archived by this commit (``erase``: the archive is
        erased instead)."""
        archive, messages = archive_of(run.cid, departed, erase=erase, on=self.config.archive_on,
                                       max_bytes=self.config.archive_max_bytes)
        if record is not None:  # the durable record exports what the archive received (and its erasure)
            record = entries.with_archive(record, record_rows(messages), erased=archive.erase)
        entry = {"at": time.time(), "id": env.message_id, "kind": env.kind, **trace, **archived_trace(archive)}
        done = self.write(run, version, env.message_id, new_state=new_state, reply=reply,
                          trace=msgpack.packb(entry, use_bin_type=True), dead=None,
                          claim_delivery_ms=self.config.drain.lease_ms if claim_delivery else 0, also=also,
                          record=record, tokens=tokens, appended=_appended(resident, new_state, run.stored),
                          archive=archive)
        if new_state is not None:
            self._keep(run, done.tag, resident)
        return done

    def write(self, run: DrainRun, version: int, input_id: str, *, new_state: bytes | None,
              reply: bytes | None, trace: bytes, dead: bytes | None, claim_delivery_ms: int = 0,
              also: Sequence[str] = (), record: bytes | None = None, tokens: int = 0,
              appended: tuple[int, int] | None = None, archive: ArchiveWrite = NO_ARCHIVE) -> CommitResult:
        """The commit script, with the heartbeat held off while it runs and stopped when it gave the lease up."""
        with run.beat.committing(), tracing.span("commit", attributes={"parley.input.id": input_id}):
            done = self.store.commit(run.cid, run.token, expected_version=version, input_id=input_id,
                                     new_state=new_state, reply=reply, trace=trace, dead=dead,
                                     lease_ms=self.config.drain.lease_ms, claim_delivery_ms=claim_delivery_ms,
                                     also=also, peek=self.config.burst.peek, record=record, tokens=tokens,
                                     appended_to=appended[0] if appended else None,
                                     folded_from=appended[1] if appended else None, archive=archive)
            if done.next is None:
                run.beat.end()
        run.applied += 1 + len(also)
        return done

    def quarantine(self, run: DrainRun, snap: Snapshot, q: Quarantine | None) -> int:
        """Set the unusable stored state aside before the commit; returns the version that commit expects."""
        if q is None:
            return snap.version
        log.warning("unusable state quarantined; starting fresh",
                    extra={"conversation_id": run.cid, "reason": q.reason, "detail": q.detail})
        metrics.QUARANTINED.labels(q.reason).inc()
        version = self.store.quarantine(run.cid, run.token, q.blob, f"{q.reason}: {q.detail}",
                                        expected_version=snap.version)
        self._keep(run, "", None)
        return version

    def _keep(self, run: DrainRun, tag: str, resident: Resident | None) -> None:
        """The stored state is now ``tag`` (``''``: none): keep ``resident`` as it, or forget what was kept."""
        run.kept = (tag, resident) if tag and resident is not None else None
        self.residents.put(run.cid, tag, resident)


def _appended(resident: Resident | None, new_state: bytes | None, stored: bytes | None) -> tuple[int, int] | None:
    """When ``new_state`` is the stored blob with bytes appended, or with its loose frames folded (format 5): the
    stored blob's length and where the new bytes start (the commit then sends only those), else None (written
    whole). The resident says what its blob was made on; that must be the very blob the store holds (a turn retried
    on a state compacted under the lease appended to the compacted blob instead)."""
    if resident is None or not new_state or stored is None:
        return None
    append = resident.append_of(new_state)
    if append is None or len(stored) != append.basis:
        return None
    cut = append.cut
    if memoryview(stored)[:cut] != memoryview(new_state)[:cut] or stored[cut:] != append.replaced:
        return None
    return append.basis, cut
