"""The turn journal's storage: what a turn records under its lease so that a retry replays it (model rounds, tool
results, and which inputs a burst took in), and reading it back at the start of a turn. The entries are opaque bytes
here; the pure core encodes and decodes them, the service replays them."""

from __future__ import annotations

from collections.abc import Sequence

from worker.store.answers import JournalRead
from worker.store.codes import Refusal, refused
from worker.store.core import StoreCore
from worker.store.redis_errors import store_errors


class TurnJournalStore(StoreCore):
    """One hash per conversation; every field is prefixed with the id of the head input it belongs to, and the
    commit that applies that input deletes the hash."""

    @store_errors
    def record_step(self, cid: str, token: int, input_id: str, *, step: int, entry: bytes,
                    call_id: str | None = None) -> bool:
        """Record one entry of ``input_id``'s turn journal under the lease: the model round ``step`` (``call_id``
        ``None``) or the result of call ``call_id`` in that round. Returns ``False`` when the journal already
        holds ``StoreLimits.journal_max`` entries (the entry is not kept: the journal stays bounded, and that
        step would run again on a retry).

        Raises :class:`~worker.errors.StaleLeaseError`, recording nothing, when another worker took the
        conversation over or the input was already applied: the turn must stop before the model sees more.
        """
        if step < 0:
            raise ValueError("step must be >= 0")
        field = f"{input_id}\nr\n{step}" if call_id is None else f"{input_id}\nc\n{step}\n{call_id}"
        return self._append(cid, token, input_id, field, entry)

    @store_errors
    def read_journal(self, cid: str, input_id: str) -> JournalRead:
        """``input_id``'s turn journal: what an earlier run of its turn recorded (empty for a first run)."""
        rounds: dict[int, bytes] = {}
        results: dict[tuple[int, str], bytes] = {}
        burst: tuple[str, ...] | None = None
        prefix = input_id.encode() + b"\n"
        for field, entry in self._client.hgetall(self.keys(cid).journal).items():
            if not field.startswith(prefix):
                continue  # another input's (cannot outlive its commit; skipped all the same)
            kind, _, rest = field[len(prefix):].decode().partition("\n")
            step, _, call_id = rest.partition("\n")
            if not step.isdigit():
                continue
            if kind == "r":
                rounds[int(step)] = bytes(entry)
            elif kind == "c" and call_id:
                results[(int(step), call_id)] = bytes(entry)
            elif kind == "b":
                burst = tuple(bytes(entry).decode().split("\n"))
        return JournalRead(rounds, results, burst)

    @store_errors
    def record_burst(self, cid: str, token: int, input_id: str, ids: Sequence[str]) -> bool:
        """Record which inputs the turn of head input ``input_id`` takes in (``ids``, the head first), before the
        model sees them: a retry of that turn takes in the same inputs, so the rounds and tool results it replays
        were made for the same prompt. Returns ``False`` when the journal is full (not recorded).

        Raises :class:`~worker.errors.StaleLeaseError` as :meth:`record_step` does.
        """
        return self._append(cid, token, input_id, f"{input_id}\nb\n0", "\n".join(ids).encode())

    def _append(self, cid: str, token: int, input_id: str, field: str, entry: bytes) -> bool:
        """One fenced journal entry (RECORD_STEP): ``False`` when the journal is full."""
        res = self._scripts.record_step(keys=self.keys(cid), token=token, input_id=input_id, field=field, entry=entry,
                                        max_entries=self.limits.journal_max, ttl_ms=self.limits.idle_ttl_ms)
        if res.code < 0 and res.code != Refusal.JOURNAL_FULL:
            raise refused(res.code, cid=cid, step="journal entry", item=input_id)
        return res.code == 1
