"""The Redis stream inlet: entries of ``PARLEY_INLET_STREAM`` become inputs of their conversations.

Every inlet process joins one consumer group, so they share the stream. An entry is acknowledged (``XACK``) only once
its input is in the conversation's mailbox (or was already: a duplicate), or once it has been moved to the dead-letter
stream ``<stream>:dead`` with its reason, in the same transaction. A full mailbox or a store outage leaves the entry
pending: this inlet reads its own pending entries again after a pause, and an entry another inlet left pending past
``PARLEY_INLET_CLAIM_IDLE_SECONDS`` (it crashed) is claimed with ``XAUTOCLAIM``.

Order: the group hands a conversation's entries to different inlets, in stream order. Before applying a batch, an
inlet asks Redis (held.lua) which conversations still have an older entry pending outside the batch; an entry of such
a conversation waits. Since an entry leaves the pending list only once its input is accepted, and entries are handed
out in stream order, a conversation's inputs reach its mailbox in stream order whichever inlets read them, crashes
included. An entry without a ``message_id`` gets ``<stream>/<entry id>``, so a redelivery is a duplicate.
"""

from __future__ import annotations

import importlib.resources
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import redis
from prometheus_client import Counter

from worker.client import CheckedInput, ConversationClient
from worker.errors import InboxFullError, InputError, StoreError
from worker.inlet.messages import QueueMessage, Unacceptable, entry_span, parse_message
from worker.store import lua

log = logging.getLogger("parley.inlet")

ENTRIES = Counter("parley_inlet_entries_total",
                  "Queue messages the inlet handled, by outcome: accepted, duplicate, dead (moved to the dead-letter "
                  "stream with its reason), held (left pending: an older entry of its conversation is pending, its "
                  "mailbox is full, or the store is unavailable; tried again).", ["outcome"])
#: Pending entries held.lua examines per batch; past it, the entries newer than the last one examined wait.
PENDING_EXAMINED = 10_000
FIELD = b"envelope"
TRACE_FIELD = b"traceparent"  # optional: the producer's trace, which the input's continues


def dead_stream(stream: str) -> str:
    """Where the inlet moves what it cannot accept: ``<stream>:dead``."""
    return f"{stream}:dead"


def _queue(waves: list[list[tuple[bytes, CheckedInput]]], depth: dict[str, int], eid: bytes,
           checked: CheckedInput) -> None:
    """Put ``checked`` in the first wave that holds no input of its conversation yet (``depth``: how many waves
    hold one)."""
    n = depth[checked.conversation_id] = depth.get(checked.conversation_id, 0) + 1
    if n > len(waves):
        waves.append([])
    waves[n - 1].append((eid, checked))


def _sid(entry_id: bytes | str) -> tuple[int, int]:
    ms, _, seq = (entry_id.decode() if isinstance(entry_id, bytes) else entry_id).partition("-")
    return int(ms), int(seq or 0)


@dataclass
class Inlet:
    """One consumer of the group. ``step()`` does one round: claim, retry its own pending entries, read new ones."""

    r: redis.Redis
    client: ConversationClient
    stream: str
    group: str
    consumer: str
    batch: int = 100
    claim_idle_ms: int = 30_000
    retry_seconds: float = 1.0
    block_ms: int = 1000
    _held: Any = field(default=None, init=False, repr=False)
    _retry_at: float = field(default=0.0, init=False)
    _claim_at: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        source = importlib.resources.files("worker.inlet").joinpath("held.lua").read_text()
        self._held = self.r.register_script(lua.resolve(source))  # its ``--! include`` lines: the store's fragments

    def ensure_group(self) -> None:
        """Create the group (from the stream's start: entries written before the first inlet ran are not skipped)."""
        try:
            self.r.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def step(self) -> int:
        """One round; how many entries it accepted or moved aside (held ones are not counted)."""
        now = time.monotonic()
        done = 0
        if now >= self._claim_at:
            self._claim_at = now + self.claim_idle_ms / 2000
            claimed: Any = self.r.xautoclaim(self.stream, self.group, self.consumer, self.claim_idle_ms, "0-0",
                                        count=self.batch)
            done += self.apply(claimed[1])
        if now >= self._retry_at:
            done += self._retry_own()
        return done + self.apply(self._read(">", block=self.block_ms if done == 0 else None))

    def _read(self, start: str | bytes, block: int | None = None) -> list[Any]:
        got: Any = self.r.xreadgroup(self.group, self.consumer, {self.stream: start}, count=self.batch, block=block)
        return list(got[0][1]) if got else []

    def _retry_own(self) -> int:
        """Apply this consumer's pending entries again, oldest first, a batch at a time."""
        done, start = 0, "0"
        while True:
            entries = self._read(start)
            if not entries:
                return done
            done += self.apply(entries)
            start = entries[-1][0]

    def apply(self, entries: list[Any]) -> int:
        """Accept ``entries`` (``[(id, {field: value})]``, stream order) in order; returns how many were accepted or
        moved aside. A held entry stays pending and is tried again after ``retry_seconds``."""
        entries = [(eid, fields) for eid, fields in entries if fields]  # a claimed entry trimmed away is None
        if not entries:
            return 0
        outcomes = self._outcomes(entries, self._blockers(entries))
        accepted: list[bytes] = []
        done = 0
        for eid, _ in entries:
            outcome = outcomes.get(eid, "unavailable")  # past a store outage: the rest of the batch stays pending
            ENTRIES.labels("held" if outcome == "unavailable" else outcome).inc()
            if outcome in ("held", "unavailable"):
                self._retry_at = time.monotonic() + self.retry_seconds
            else:
                done += 1
            if outcome in ("accepted", "duplicate"):
                accepted.append(eid)
        if accepted:
            # One acknowledgement for the batch (a round trip per entry halved the rate). Until it lands, the
            # accepted entries still look pending: a crash now redelivers them as duplicates, and other inlets
            # hold the same conversations' later entries a moment longer, never out of order.
            self.r.xack(self.stream, self.group, *accepted)
        return done

    def _outcomes(self, entries: list[Any], blocked: dict[str, tuple[int, int]]) -> dict[bytes, str]:
        """Each entry's outcome (accepted, duplicate, dead, held); entries left out were not tried (the store is
        unavailable). The inputs go to the store in waves of one round trip each, a wave holding at most one entry
        per conversation: the first entry of every conversation, then the second, ... A conversation whose entry is
        held (an older entry pending elsewhere, a full mailbox) has its later entries of the batch held too, so
        nothing overtakes it; and within a wave no two inputs of a conversation can race a worker's drain. What is
        not a plain input (a reset, a scheduled input, an answered event:
        :attr:`~worker.client.builder.CheckedInput.plain`) is accepted alone, once the waves of the entries before it
        are in."""
        outcomes: dict[bytes, str] = {}
        held: set[str] = set()  # held while reading the batch: the entries after it wait, not those before
        full: set[str] = set()  # found full while accepting: its entries in later waves wait
        waves: list[list[tuple[bytes, CheckedInput]]] = []
        depth: dict[str, int] = {}
        parsed: dict[bytes, QueueMessage | Unacceptable] = {}
        for eid, fields in entries:
            try:
                parsed[eid] = parse_message(fields.get(FIELD, b""))
            except Unacceptable as exc:
                parsed[eid] = exc
        # A player's phone number and user id name one conversation: every id of the batch resolved in one round trip.
        try:
            named = self.client.resolve_many([m.conversation_id for m in parsed.values() if isinstance(m, QueueMessage)])
        except StoreError as exc:
            log.error("inlet: store unavailable, the batch is held: %s", exc)
            return outcomes
        for eid, fields in entries:
            msg = parsed[eid]
            if isinstance(msg, Unacceptable):
                outcomes[eid] = self._dead(eid, fields, msg.reason)
                continue
            cid, sid = named.get(msg.conversation_id, msg.conversation_id), _sid(eid)
            older, unknown = blocked.get(cid) or blocked.get(msg.conversation_id), blocked.get("*")
            if cid in held or (older is not None and older < sid) or (unknown is not None and unknown < sid):
                held.add(cid)
                outcomes[eid] = "held"
                continue
            kwargs = msg.body.arguments()
            kwargs.setdefault("message_id", f"{self.stream}/{eid.decode()}")
            try:
                checked = self.client.inputs.build(msg.kind, cid, kwargs)
                if checked.plain:
                    with entry_span(cid, fields.get(TRACE_FIELD)):
                        _queue(waves, depth, eid, self.client.intake.traced(checked))
                    continue
                if not self._send(waves, full, outcomes):
                    return outcomes
                waves, depth = [], {}
                if cid in full:
                    raise InboxFullError(cid)
                with entry_span(cid, fields.get(TRACE_FIELD)):
                    done = self.client.intake.accept(checked)
                outcomes[eid] = "duplicate" if done.duplicate else "accepted"
            except InboxFullError:
                log.warning("inlet: %s's mailbox is full; entry %s held", cid, eid.decode())
                held.add(cid)
                outcomes[eid] = "held"
            except InputError as exc:
                outcomes[eid] = self._dead(eid, fields, f"{exc.field or 'input'}: {exc}" if exc.field else str(exc))
            except StoreError as exc:
                log.error("inlet: store unavailable, entry %s held with the rest of its batch: %s", eid.decode(), exc)
                return outcomes
        self._send(waves, full, outcomes)
        return outcomes

    def _send(self, waves: list[list[tuple[bytes, CheckedInput]]], full: set[str], outcomes: dict[bytes, str]) -> bool:
        """Accept the waves in order; ``False`` when the store is unavailable (the rest stays pending)."""
        for wave in waves:
            try:
                self._accept_wave(wave, full, outcomes)
            except StoreError as exc:
                log.error("inlet: store unavailable, entries from %s held: %s", wave[0][0].decode(), exc)
                return False
        return True

    def _accept_wave(self, wave: list[tuple[bytes, CheckedInput]], full: set[str],
                     outcomes: dict[bytes, str]) -> None:
        tried = []
        for eid, checked in wave:
            if checked.conversation_id in full:  # an earlier wave's entry of it found the mailbox full
                outcomes[eid] = "held"
            else:
                tried.append((eid, checked))
        results = self.client.intake.accept_many([checked for _, checked in tried])
        for (eid, checked), result in zip(tried, results, strict=True):
            if isinstance(result, InboxFullError):
                log.warning("inlet: %s's mailbox is full; entry %s held", checked.conversation_id, eid.decode())
                full.add(checked.conversation_id)
                outcomes[eid] = "held"
            else:
                outcomes[eid] = "duplicate" if result.duplicate else "accepted"

    def _blockers(self, entries: list[Any]) -> dict[str, tuple[int, int]]:
        ids = [eid for eid, _ in entries]
        out = self._held(keys=[self.stream], args=[self.group, ids[-1], PENDING_EXAMINED, *ids])
        blocked = {bytes(out[i]).decode(): _sid(out[i + 1]) for i in range(1, len(out) - 1, 2)}
        if out[0]:  # more pending entries than examined: past the newest examined, nothing is known
            blocked["*"] = _sid(out[0])
        return blocked

    def _dead(self, eid: bytes, fields: dict[bytes, bytes], reason: str) -> str:
        log.warning("inlet: entry %s moved to %s: %s", eid.decode(), dead_stream(self.stream), reason)
        pipe = self.r.pipeline(transaction=True)
        pipe.xadd(dead_stream(self.stream), {"entry_id": eid, "reason": reason, "consumer": self.consumer,
                                             FIELD: fields.get(FIELD, b"")})
        pipe.xack(self.stream, self.group, eid)
        pipe.execute()
        return "dead"
