"""Applying inputs: the drainer takes a conversation's lease and applies its mailbox, in order.

The guarantees, and where they come from:

- Order and single writer: a per-conversation lease with a fencing token (``store.begin``), kept alive by the
  heartbeat while a turn runs; inputs are taken from the head of the mailbox one at a time.
- Effect once: the commit script removes the input, records its id as applied and writes the state and the
  reply in one step, refusing a stale token. A redelivered task finds the lease held or the input gone.
- Nothing lost: an input leaves the mailbox only by a commit that applied it or dead-lettered it.

The head input is decided first (:class:`~worker.service.drain.decide.Decider`: an outcome, nothing written),
then the outcome is applied (:class:`~worker.service.drain.apply.Applier`: one store call per kind). The features
of a drain plug in as hooks (:mod:`worker.service.drain.hooks`). The reply the drain ended with goes on down to the
deliverer, with the delivery its last commit started (:mod:`worker.service.drain.handover`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from worker import metrics
from worker.conversation.chat import Chat
from worker.conversation.resident import ResidentCache
from worker.errors import StaleLeaseError
from worker.service.config import ServiceConfig, Wake
from worker.service.drain.apply import Applier
from worker.service.drain.decide import Decider
from worker.service.drain.handover import Delivers, Handover
from worker.service.drain.hooks import DrainHook, Hooks, build_hooks
from worker.service.drain.hooks.traces import input_span
from worker.service.drain.media import MediaPreparer
from worker.service.drain.outcomes import HandBack
from worker.service.drain.run import DrainRun
from worker.service.heartbeat import Heartbeat
from worker.service.presence import Presence
from worker.store.answers import Snapshot
from worker.store.interfaces import DrainStore

log = logging.getLogger("parley.service")


@dataclass(frozen=True)
class Drained:
    """What a drain did: the inputs it applied."""

    applied: int


class Drainer:
    """Applies a conversation's inputs under its lease, then hands the reply it ended with to ``deliverer``.
    ``hooks``: the features' hooks (default: those the configuration turns on,
    :func:`~worker.service.drain.hooks.build_hooks`)."""

    def __init__(self, store: DrainStore, chat: Chat, wake: Wake, config: ServiceConfig,
                 heartbeat: Heartbeat, *, deliverer: Delivers, presence: Presence | None = None,
                 media: MediaPreparer | None = None, residents: ResidentCache | None = None,
                 hooks: Sequence[DrainHook] | None = None) -> None:
        self.chat = chat
        self.handover = Handover(deliverer, wake, inline=config.delivery.deliver_inline)
        # Each conversation's state as this worker last wrote or read it, decoded: a turn on it skips the decode,
        # and the begin script skips sending a blob this worker already holds.
        self.residents = residents if residents is not None else ResidentCache(0)
        self.wake = wake
        self.media = media or MediaPreparer()
        # A bare photo can join a burst only when the model will see it (else it gets the short answer, alone).
        sees = self.media.reads_images and self.media.fetcher is not None
        self.config = replace(config, burst=replace(config.burst, reads_images=sees))
        self.heartbeat = heartbeat
        self._given = hooks
        self._store = store
        self._presence = presence if presence is not None else Presence.disabled()
        self._assemble()

    @property
    def store(self) -> DrainStore:
        return self._store

    @store.setter
    def store(self, store: DrainStore) -> None:
        self._store = store
        self._assemble()

    @property
    def presence(self) -> Presence:
        return self._presence

    @presence.setter
    def presence(self, presence: Presence) -> None:
        self._presence = presence
        self._assemble()

    def _assemble(self) -> None:
        """The parts, built again when the store or the presence is replaced (so the hooks use the new one)."""
        given = self._given
        self.hooks = Hooks(given if given is not None else build_hooks(self._store, self.config, self._presence))
        self.decider = Decider(self._store, self.chat, self.config, self.media, self.hooks)
        self.applier = Applier(self._store, self.config, self.wake, self.residents, self.hooks)

    def drain(self, cid: str) -> Drained:
        """Apply every input waiting for ``cid``, in order, then deliver the reply the drain ended with.

        Returns 0 at once when another worker holds the conversation (it will see our input: the commit that
        empties the mailbox also gives the lease up, atomically), when nothing waits, or when the head input
        waits for a scheduled retry or for the rest of a burst's quiet period. Raises :class:`RetryLater` when
        the model is unavailable; the input stays at the head of the mailbox and the lease is given up so the retry
        (or the sweeper) resumes it.
        """
        store, lease_ms = self._store, self.config.drain.lease_ms
        kept = self.residents.entry(cid)
        begin = store.begin(cid, lease_ms, peek=self.config.burst.peek, have=kept[0] if kept else "")
        if begin.status != "ok" or begin.snapshot is None:
            return Drained(0)
        token, attempts = begin.token, begin.attempts
        snap: Snapshot | None = begin.snapshot
        decide, apply, hooks = self.decider.decide, self.applier.apply, self.hooks
        run: DrainRun | None = None
        try:
            with self.heartbeat.holding(lambda: store.renew_lease(cid, token, lease_ms),
                                        lambda: store.release(cid, token), "drain") as beat:
                run = DrainRun(cid, token, beat, kept, started=time.monotonic())
                first = begin.snapshot
                if first.pause_read and first.input_id:
                    run.pause_seen = (first.input_id, first.pause)
                    run.opt_out_seen = (first.input_id, first.opted_out)
                while snap is not None:
                    with input_span(cid, snap, attempts) as traced:
                        done = apply(run, snap, decide(run, snap, attempts))
                        traced.applied = done is not None
                    if done is None:  # put off or handed back: the lease given up
                        break
                    metrics.MAILBOX_DEPTH.set(done.depth)
                    snap, attempts = done.next, done.next_attempts  # None: the mailbox emptied, lease given up
                    if snap is not None and hooks.hand_back(run):
                        apply(run, snap, HandBack(snap.input_id or ""))
                        break
        except StaleLeaseError:  # the release above was a no-op: the fence is no longer ours
            metrics.STALE_COMMITS.inc()
            log.warning("lease lost; another worker owns the conversation", extra={"conversation_id": cid})
            return Drained(run.applied if run else 0)
        assert run is not None  # the body ran
        self.handover.hand_over(run, self._presence)
        return Drained(run.applied)
