"""The Redis stream inlet: entries of ``PARLEY_INLET_STREAM`` become inputs of their conversations.

Every inlet process joins one consumer group, so they share the stream. An entry is acknowledged (``XACK``) only once
its input is in the conversation's mailbox (or was already: a duplicate), or once it has been moved to the dead-letter
stream ``<stream>:dead`` with its reason, in the same transaction. A full mailbox or a store outage leaves the entry
pending: this inlet keeps it among its held entries (:mod:`worker.inlet.held`) and tries it again after a pause, when
its conversation's mailbox has room; an entry another inlet left pending past ``PARLEY_INLET_CLAIM_IDLE_SECONDS`` (it
crashed) is claimed with ``XAUTOCLAIM``.

Order: the group hands a conversation's entries to different inlets, in stream order. Each entry is noted in the
pending index as it is handed out (:mod:`worker.inlet.pending`); before applying a batch, an inlet asks Redis
(held.lua) which of the batch's conversations still have an older entry pending outside the batch; an entry of such
a conversation waits. Since an entry leaves the pending list only once its input is accepted, and entries are handed
out in stream order, a conversation's inputs reach its mailbox in stream order whichever inlets read them, crashes
included. An entry without a ``message_id`` gets ``<stream>/<entry id>``, so a redelivery is a duplicate.

The work of a round is bounded whatever the backlog: a batch's look-up costs the batch's size, a retry takes at most
``PARLEY_INLET_RETRY_BUDGET`` held entries, of conversations whose mailbox has room, and keeping the held entries
this inlet's (``XCLAIM`` of their ids, so no other inlet claims them while it lives) runs once per claim period.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import redis
from prometheus_client import Counter

from worker.client import ConversationClient
from worker.inlet.batch import BatchAccept, Parsed
from worker.inlet.held import HeldEntries
from worker.inlet.messages import Unacceptable, parse_message
from worker.inlet.pending import Entry, PendingIndex, conversation_of, entry_sid
from worker.store.keys import InletKeys

log = logging.getLogger("parley.inlet")

ENTRIES = Counter("parley_inlet_entries_total",
                  "Queue messages the inlet handled, by outcome: accepted, duplicate, dead (moved to the dead-letter "
                  "stream with its reason), held (left pending: an older entry of its conversation is pending, its "
                  "mailbox is full, or the store is unavailable; tried again).", ["outcome"])
OUTCOMES = ("accepted", "duplicate", "dead", "held")
FIELD = b"envelope"
#: Ids per ``XCLAIM`` that keeps this inlet's held entries its own (one short call each).
TOUCH_CHUNK = 1000


def export_outcomes() -> None:
    """Every outcome's series from 0: one that first appears at 1 shows Prometheus no increase, and the alert on dead
    entries would miss the first of them."""
    for outcome in OUTCOMES:
        ENTRIES.labels(outcome)


def dead_stream(stream: str) -> str:
    """Where the inlet moves what it cannot accept: ``<stream>:dead``."""
    return InletKeys(stream).dead


@dataclass
class Inlet:
    """One consumer of the group. ``step()`` does one round: claim, retry held entries, read new ones.
    ``retry_budget``: held entries tried again per round at most (default: ten batches); ``dead_max`` and
    ``dead_max_age_s``: the bounds of ``<stream>:dead``."""

    r: redis.Redis
    client: ConversationClient
    stream: str
    group: str
    consumer: str
    batch: int = 100
    claim_idle_ms: int = 30_000
    retry_seconds: float = 1.0
    block_ms: int = 1000
    retry_budget: int = 0
    dead_max: int = 10_000
    dead_max_age_s: float = 2 * 86400.0
    held: HeldEntries = field(default_factory=HeldEntries, init=False)
    _index: PendingIndex = field(init=False, repr=False)
    _newest: bytes = field(default=b"0-0", init=False)
    _rescan: bytes | None = field(default=b"0", init=False)  # this consumer's pending entries not looked at yet
    _retry_at: float = field(default=0.0, init=False)
    _claim_at: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self._index = PendingIndex(self.r, self.stream, self.group)
        self.retry_budget = self.retry_budget or 10 * self.batch

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
            self._claim_at = now + self.claim_idle_ms / 4000
            self._touch()
            claimed: Any = self.r.xautoclaim(self.stream, self.group, self.consumer, self.claim_idle_ms, "0-0",
                                             count=self.batch)
            done += self.apply(claimed[1], note=True)
        if now >= self._retry_at:
            done += self._retry()
        entries = self._read(">")
        # A script cannot block: wait for an entry newer than the newest the read saw, then read it.
        if (not entries and done == 0 and self.block_ms
                and self.r.xread({self.stream: self._newest}, count=1, block=self.block_ms)):
            entries = self._read(">")
        return done + self.apply(entries)

    def _read(self, start: str | bytes) -> list[Entry]:
        self._newest, entries = self._index.read(self.consumer, start, self.batch)
        return entries

    def _retry(self) -> int:
        """Apply again, a bounded number per round: this consumer's pending entries not looked at yet (after a
        restart under the same name), then held entries of conversations whose mailbox has room."""
        done, budget = 0, self.retry_budget
        while self._rescan is not None and budget > 0:
            entries = self._read(self._rescan)
            self._rescan = entries[-1][0] if entries else None
            done += self.apply(entries)
            budget -= max(len(entries), 1)
        ids = self.held.due(budget, self._has_room)
        if ids:
            done += self.apply(self._fetch(ids))
        if done:
            self._retry_at = 0.0  # it moved: go on next round rather than wait
        return done

    def _has_room(self, cids: list[str]) -> list[bool]:
        store = self.client.store
        return [depth < store.limits.max_inbox for depth in store.inbox_depths(cids)]

    def _fetch(self, ids: list[bytes]) -> list[Entry]:
        """The entries of ``ids`` in stream order (as :meth:`apply` takes them), a trimmed one with no fields."""
        ids = sorted(ids, key=entry_sid)
        pipe = self.r.pipeline(transaction=False)
        for eid in ids:
            pipe.xrange(self.stream, eid, eid)
        found = [got[0] for got in pipe.execute() if got]
        gone = set(ids) - {eid for eid, _ in found}
        return [*found, *((eid, None) for eid in ids if eid in gone)]

    def _touch(self) -> None:
        """Keep the held entries this inlet's: an entry idle past half the claim time is claimed again by this
        consumer (its idle time reset), so no other inlet takes it over while this one lives."""
        ids = self.held.ids()
        for i in range(0, len(ids), TOUCH_CHUNK):
            self.r.xclaim(self.stream, self.group, self.consumer, self.claim_idle_ms // 2, list[Any](ids[i:i + TOUCH_CHUNK]),
                          justid=True)

    def apply(self, entries: list[Any], *, note: bool = False) -> int:
        """Accept ``entries`` (``[(id, {field: value})]``, stream order) in order; returns how many were accepted or
        moved aside. A held entry stays pending and is tried again after ``retry_seconds``. ``note``: the entries
        did not come through the read (claimed), so they join the pending index first."""
        trimmed = [eid for eid, fields in entries if not fields]  # pending, then trimmed away: nothing to accept
        if trimmed:
            self.held.forget(trimmed)
            self.r.xack(self.stream, self.group, *trimmed)
        parsed = [Parsed(eid, fields, _parse(fields)) for eid, fields in entries if fields]
        if not parsed:
            return 0
        cids = {p.entry_id: conversation_of(p.fields.get(FIELD)) for p in parsed}
        if note:
            self._index.note((cid, eid) for eid, cid in cids.items() if cid is not None)
        # Every entry of the batch counts as in it, a dead one too (the read noted its conversation as Lua read it).
        batch = [(cid, p.entry_id) for p in parsed
                 if (cid := cids[p.entry_id] if isinstance(p.message, Unacceptable) else p.message.conversation_id)]
        decided = BatchAccept(self.client, self.stream).decide(parsed, self._index.older_pending(batch))
        settled: list[tuple[str | None, bytes]] = []
        pipe = self.r.pipeline(transaction=True)
        for p in parsed:
            eid, outcome = p.entry_id, decided.outcomes.get(p.entry_id, "unavailable")  # untried: the store is down
            ENTRIES.labels("held" if outcome == "unavailable" else outcome).inc()
            if outcome in ("held", "unavailable"):
                cid = p.message.conversation_id if not isinstance(p.message, Unacceptable) else cids[eid]
                self.held.hold(cid or "", eid, full=cid in decided.full)
                self._retry_at = time.monotonic() + self.retry_seconds
                continue
            self.held.settled(cids[eid], eid)
            settled.append((cids[eid], eid))
            if outcome == "dead":
                self._dead(pipe, p, decided.reasons[eid])
        if settled:
            # One transaction for the batch (a round trip per entry halved the rate). Until it lands, the accepted
            # entries still look pending: a crash now redelivers them as duplicates, and other inlets hold the same
            # conversations' later entries a moment longer, never out of order.
            self._index.settle(pipe, settled)
            pipe.execute()
        return len(settled)

    def _dead(self, pipe: Any, entry: Parsed, reason: str) -> None:
        log.warning("inlet: entry %s moved to %s: %s", entry.entry_id.decode(), dead_stream(self.stream), reason)
        pipe.xadd(dead_stream(self.stream), {"entry_id": entry.entry_id, "reason": reason, "consumer": self.consumer,
                                             FIELD: entry.fields.get(FIELD, b"")},
                  maxlen=self.dead_max, approximate=False)  # exact: dead letters are rare, the bound is a promise
        # Bounded in age too: the ids are times, so the letters older than the age are one range.
        pipe.xtrim(dead_stream(self.stream), minid=f"{int((time.time() - self.dead_max_age_s) * 1000)}-0",
                   approximate=False)


def _parse(fields: dict[bytes, bytes]) -> Any:
    try:
        return parse_message(fields.get(FIELD, b""))
    except Unacceptable as exc:
        return exc
