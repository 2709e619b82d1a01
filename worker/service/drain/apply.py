"""Applying an outcome: one method per kind, each with the one store call that makes it happen.

A commit (the turn's answer, a notice, an event or a reset, a splice, a dead letter) is written by the
:class:`~worker.service.drain.commit.Committer`; here each kind builds what it commits and counts what it did. A
deferral or a hand-back gives the lease up with the input still at the head; a retry holds the conversation and
raises :class:`~worker.service.config.RetryLater`. Every call that may give the lease up runs inside the beat's
``committing`` (see :class:`~worker.service.heartbeat.Beat`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import msgpack

from worker import metrics
from worker.channels.split import split_message
from worker.conversation.resident import ResidentCache
from worker.envelopes.inputs import DeadLetter, InputKind, ReplyRecord, decode_envelope
from worker.errors import EnvelopeError
from worker.observability import tracing
from worker.service.config import ServiceConfig, Wake, count_pinned_dropped
from worker.service.drain.burst import answers_event
from worker.service.drain.commit import Committer
from worker.service.drain.hooks.base import Hooks
from worker.service.drain.outcomes import (
    Answer,
    Applied,
    DeadLettered,
    Defer,
    HandBack,
    Notice,
    Outcome,
    Retry,
    Spliced,
    Spoken,
    Withheld,
)
from worker.service.drain.recovery import retry_later
from worker.service.drain.run import DrainRun, Written
from worker.store.answers import CommitResult, Snapshot
from worker.store.interfaces import DrainStore

log = logging.getLogger("parley.service")

# Bound once: looking a labelled child up costs more than the increment (every turn).
_MESSAGES_APPLIED = metrics.INPUTS.labels(InputKind.MESSAGE, "applied")


def apology_for(text: str, cid: str, snap: Snapshot) -> ReplyRecord | None:
    """The configured apology (``text``) for a player's dead-lettered chat message: never silence. Inputs that are
    not a player's message (events, resets, one that does not decode) get none."""
    if not text:
        return None
    try:
        env = decode_envelope(snap.input or b"")
    except EnvelopeError:
        return None
    if env.kind is not InputKind.MESSAGE or env.conversation_id != cid:
        return None
    return ReplyRecord(reply_id=env.message_id, conversation_id=cid, recipient=env.recipient or cid,
                       parts=[text], reply_to=env.reply_to, traceparent=tracing.current())


class Applier:
    """Applies the outcomes of one drainer's decisions (shared by its threads: what a drain knows is its run)."""

    def __init__(self, store: DrainStore, config: ServiceConfig, wake: Wake, residents: ResidentCache,
                 hooks: Hooks) -> None:
        self.store, self.config, self.wake, self.hooks = store, config, wake, hooks
        self.commits = Committer(store, config, residents)
        self._by_kind: dict[type, Callable[[DrainRun, Snapshot, Any], CommitResult | None]] = {
            Answer: self._answer, Notice: self._notice, Applied: self._applied, Spliced: self._spliced,
            DeadLettered: self._dead, Defer: self._defer, HandBack: self._hand_back, Retry: self._retry,
            Withheld: self._withheld, Spoken: self._spoken}

    def apply(self, run: DrainRun, snap: Snapshot, outcome: Outcome) -> CommitResult | None:
        """Apply ``outcome`` for the head of ``snap``: the commit, or None when the drain ends here with the
        lease given up (a deferral, a hand-back)."""
        run.stored = run.stored_blob(snap)
        return self._by_kind[type(outcome)](run, snap, outcome)

    def _answer(self, run: DrainRun, snap: Snapshot, a: Answer) -> CommitResult:
        version = self.commits.quarantine(run, snap, a.quarantine)
        result, inputs = a.result, a.inputs
        # Inline delivery starts in the commit that ends the drain (if it does): one round trip fewer per reply.
        done = self.commits.commit(run, version, inputs[0].env, result.state, a.data, a.trace,
                                   claim_delivery=self.config.delivery.deliver_inline, also=a.also,
                                   resident=result.resident, tokens=a.trail.usage.total,
                                   record=self.hooks.entry(run, snap, a, a.reply),
                                   departed=result.departed, erase=result.reset == "phrase")
        metrics.TURN_SECONDS.observe(time.perf_counter() - a.started)
        kinds = [p.env.kind for p in inputs]
        answered = answers_event(inputs)  # the game's event answered: counted apart from the player's turns
        _MESSAGES_APPLIED.inc(kinds.count(InputKind.MESSAGE))
        if InputKind.EVENT in kinds:
            metrics.INPUTS.labels(InputKind.EVENT, "answered" if answered else "applied").inc(kinds.count(InputKind.EVENT))
        metrics.BURST_INPUTS.observe(len(inputs))
        count_pinned_dropped(result.pinned_dropped)
        log.info("turn applied", extra={"conversation_id": run.cid, "message_id": inputs[0].id,
                                        "kind": InputKind.EVENT if answered else InputKind.MESSAGE,
                                        "inputs": len(inputs), "parts": len(a.reply.parts),
                                        "finish": result.finish_reason})
        self.after_reply(run, done, (a.data, a.reply))
        if result.needs_compaction:
            self.ask_compaction(run)
        return done

    def _notice(self, run: DrainRun, snap: Snapshot, n: Notice) -> CommitResult:
        env, also = n.env, n.also
        last = also[-1] if also else env
        record = ReplyRecord(reply_id=env.message_id, conversation_id=run.cid, recipient=last.recipient or run.cid,
                             parts=split_message(n.text), reply_to=last.reply_to, accepted_at=env.accepted_at,
                             traceparent=tracing.current())
        data = record.to_bytes()
        done = self.commits.commit(run, snap.version, env, None, data, {"notice": n.why, "reply": n.text},
                                   claim_delivery=self.config.delivery.deliver_inline,
                                   also=[e.message_id for e in also], record=self.hooks.entry(run, snap, n, record))
        metrics.INPUTS.labels(env.kind, "applied").inc(1 + len(also))
        metrics.NOTICES.labels(n.why).inc()
        self.after_reply(run, done, (data, record))
        return done

    def _applied(self, run: DrainRun, snap: Snapshot, a: Applied) -> CommitResult:
        version = self.commits.quarantine(run, snap, a.quarantine)
        done = self.commits.commit(run, version, a.env, a.state, None, a.trace, resident=a.resident,
                                   record=self.hooks.entry(run, snap, a, None), departed=a.departed, erase=a.erase)
        metrics.INPUTS.labels(a.env.kind, "applied").inc()
        self._grew(run, a.pinned_dropped, a.needs_compaction)
        return done

    def _withheld(self, run: DrainRun, snap: Snapshot, w: Withheld) -> CommitResult:
        """A paused conversation's turn: its inputs saved in the state, no reply (the person answers)."""
        version = self.commits.quarantine(run, snap, w.quarantine)
        head, last = w.inputs[0].env, w.inputs[-1].env
        trace: dict[str, Any] = {"paused": True, "notice" if last.kind is InputKind.NOTICE else "user": last.text}
        if len(w.inputs) > 1:
            trace["burst"] = [p.id for p in w.inputs]
        done = self.commits.commit(run, version, head, w.state, None, trace, also=w.also, resident=w.resident,
                                   record=self.hooks.entry(run, snap, w, None), departed=w.departed)
        metrics.PAUSED_TURNS.labels("withheld").inc()
        for kind in (InputKind.MESSAGE, InputKind.EVENT):
            n = sum(1 for p in w.inputs if p.env.kind == kind)
            if n:
                metrics.INPUTS.labels(kind, "withheld").inc(n)
        self._grew(run, w.pinned_dropped, w.needs_compaction)
        return done

    def _spoken(self, run: DrainRun, snap: Snapshot, s: Spoken) -> CommitResult:
        """An operator's message: queued like a reply and added to the state, in one commit."""
        version = self.commits.quarantine(run, snap, s.quarantine)
        done = self.commits.commit(run, version, s.env, s.state, s.data, {"operator": True, "reply": s.env.text},
                                   claim_delivery=self.config.delivery.deliver_inline, resident=s.resident,
                                   record=self.hooks.entry(run, snap, s, s.reply), departed=s.departed)
        metrics.INPUTS.labels(InputKind.OPERATOR, "applied").inc()
        metrics.OPERATOR_MESSAGES.inc()
        self.after_reply(run, done, (s.data, s.reply))
        self._grew(run, s.pinned_dropped, s.needs_compaction)
        return done

    def _grew(self, run: DrainRun, pinned_dropped: int, needs_compaction: bool) -> None:
        """After a commit that added to the state without the model: count the pinned items it dropped, and ask
        for a compaction when it is due."""
        count_pinned_dropped(pinned_dropped)
        if needs_compaction:
            self.ask_compaction(run)

    def _spliced(self, run: DrainRun, snap: Snapshot, s: Spliced) -> CommitResult:
        # The summariser's tokens were spent whether or not the splice still applies: they count either way.
        spent = s.env.spent
        done = self.commits.commit(run, snap.version, s.env, s.state, None,
                                   {"splice": s.applied, "reason": s.reason, "kept_new": s.kept_new},
                                   record=self.hooks.entry(run, snap, s, None), tokens=spent.total if spent else 0,
                                   departed=s.departed)  # a stale splice has none: it dropped nothing
        self.store.clear_compacting(run.cid)
        metrics.COMPACTIONS.labels("spliced" if s.applied else "stale").inc()
        if s.applied:  # a stale splice changed nothing, so it dropped nothing
            count_pinned_dropped(s.pinned_dropped)
        return done

    def _dead(self, run: DrainRun, snap: Snapshot, d: DeadLettered) -> CommitResult:
        """Dead-letter the head input, with the configured apology when it is a player's chat message."""
        input_id = snap.input_id or ""
        log.error("input dead-lettered", extra={"conversation_id": run.cid, "message_id": input_id,
                                                "reason": d.reason, "detail": d.detail})
        metrics.DEAD_LETTERS.labels("input", d.reason).inc()
        metrics.INPUTS.labels(d.kind, "dead").inc()
        dead = DeadLetter(what="input", id=input_id, reason=d.reason, detail=d.detail[:2000],
                          payload=snap.input or b"", attempts=d.attempts)
        entry = {"at": time.time(), "id": input_id, "dead": d.reason, "detail": d.detail[:500]}
        apology = apology_for(self.config.drain.dead_letter_reply, run.cid, snap)
        data = apology.to_bytes() if apology else None
        done = self.commits.write(run, snap.version, input_id, new_state=None, reply=data,
                                  trace=msgpack.packb(entry, use_bin_type=True), dead=dead.to_bytes(),
                                  claim_delivery_ms=self.config.drain.lease_ms
                                  if data and self.config.delivery.deliver_inline else 0,
                                  record=self.hooks.entry(run, snap, d, apology))
        if data:
            self.after_reply(run, done)
        return done

    def _defer(self, run: DrainRun, snap: Snapshot, d: Defer) -> None:
        """Put the turn off without holding a worker: give the lease up and hold the conversation for the rest of
        the quiet period, then a scheduled wake-up drains it (the sweeper, should that wake-up be lost)."""
        hold_ms = int(d.wait * 1000) - 100  # ends just before the wake-up, which then finds it gone
        with run.beat.committing():
            self.store.defer(run.cid, run.token, d.inputs[0].id, max(1, hold_ms))
            run.beat.end()
        metrics.BURST_DEFERRALS.inc()
        self.wake("drain", run.cid, countdown=d.wait)
        self.hooks.deferred(run, d)

    def _hand_back(self, run: DrainRun, snap: Snapshot, h: HandBack) -> None:
        """Give the conversation back to the queue with inputs waiting: the lease goes (the attempt the commit counted
        at the new head given back, nothing held), then a new wake-up queues the conversation behind the others. A
        crash between the two leaves it unleased with inputs waiting, which the sweeper finds."""
        with run.beat.committing():
            self.store.defer(run.cid, run.token, h.input_id, 0)
            run.beat.end()
        metrics.DRAIN_YIELDS.inc()
        self.wake("drain", run.cid)

    def _retry(self, run: DrainRun, snap: Snapshot, r: Retry) -> None:
        retry_later(self.store, self.config, run.cid, r.retries, r.reason, r.retry_after)

    def after_reply(self, run: DrainRun, done: CommitResult, reply: Written | None = None) -> None:
        """A commit queued a reply (``reply``, when the caller has it decoded): deliver it in this task when the
        drain ends here, else alongside."""
        if done.next is None:
            run.replied, run.delivery, run.reply = True, done.delivery, reply
        else:
            self.wake("deliver", run.cid)  # more inputs wait: deliver without holding the next turn up

    def ask_compaction(self, run: DrainRun) -> None:
        """A commit left the state over its compaction threshold: a compact task now, so the summary is computed
        while the drain goes on (the splice keeps the turns applied meanwhile), but only the first time in a drain:
        a flood of turns would otherwise publish one task per turn, all but one finding the flag set."""
        if not run.compact:
            run.compact = True
            self.wake("compact", run.cid)
