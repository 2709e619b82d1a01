"""Applying inputs: the drainer takes a conversation's lease and applies its mailbox, in order.

The guarantees, and where they come from:

- Order and single writer: a per-conversation lease with a fencing token (``store.begin``), kept alive by the
  heartbeat while a turn runs; inputs are taken from the head of the mailbox one at a time.
- Effect once: the commit script removes the input, records its id as applied and writes the state and the
  reply in one step, refusing a stale token. A redelivered task finds the lease held or the input gone.
- Nothing lost: an input leaves the mailbox only by a commit that applied it or dead-lettered it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import msgpack

from worker import metrics
from worker.conversation.chat import Chat, State
from worker.conversation.resident import Resident, ResidentCache
from worker.delivery.split import split_message
from worker.envelopes import DeadLetter, Envelope, ReplyRecord, decode_envelope
from worker.errors import (
    ContextLengthError,
    EnvelopeError,
    InputError,
    ModelError,
    StaleLeaseError,
)
from worker.service import burst
from worker.service.burst import Pending
from worker.service.config import ServiceConfig, Wake, count_pinned_dropped
from worker.service.heartbeat import Beat, Heartbeat
from worker.service.journal import StoreJournal
from worker.service.media import MediaPreparer
from worker.service.model_failures import ModelFailures
from worker.service.presence import Presence
from worker.service.recording import Recorder
from worker.service.turn import TurnRunner
from worker.store.protocol import DrainStore
from worker.store.results import CommitResult, OutboxHead, Snapshot

log = logging.getLogger("parley.service")

Claimed = tuple[int, OutboxHead]
"""A delivery already started: the delivery token and the claimed outbox head."""

Written = tuple[bytes, ReplyRecord]
"""A reply a commit queued, as written to the outbox and as the record it was encoded from."""


@dataclass(frozen=True)
class Drained:
    """What a drain did: inputs applied, whether its last commit queued a reply (to deliver now), the delivery that
    commit started, if it did, and that reply (its delivery need not decode it again)."""

    applied: int
    replied: bool = False
    delivery: Claimed | None = None
    reply: Written | None = None


@dataclass
class _Run:
    """One drain call: the conversation, its lease and what the drain did (the drainer is shared by threads)."""

    cid: str
    token: int
    beat: Beat
    kept: tuple[str, Resident] | None = None  # the state this worker holds decoded, and its tag
    applied: int = 0
    replied: bool = False
    delivery: Claimed | None = None  # the delivery the last commit started, if it did
    reply: Written | None = None  # the reply the last commit queued, when it queued one (see Drained)
    started: float = 0.0  # time.monotonic() when the drain took the lease
    compact: bool = False  # this drain has asked for a compaction already


class Drainer(ModelFailures[_Run]):
    """Applies a conversation's inputs under its lease."""

    def __init__(self, store: DrainStore, chat: Chat, wake: Wake, config: ServiceConfig,
                 heartbeat: Heartbeat, *, presence: Presence | None = None,
                 media: MediaPreparer | None = None, residents: ResidentCache | None = None) -> None:
        self.store = store
        self.chat = chat
        # Each conversation's state as this worker last wrote or read it, decoded: a turn on it skips the decode,
        # and the begin script skips sending a blob this worker already holds.
        self.residents = residents if residents is not None else ResidentCache(0)
        self.wake = wake
        self.media = media or MediaPreparer()
        # A bare photo can join a burst only when the model will see it (else it gets the short answer, alone).
        sees = self.media.reads_images and self.media.fetcher is not None
        self.config = replace(config, burst=replace(config.burst, reads_images=sees))
        self.heartbeat = heartbeat
        self.presence = presence if presence is not None else Presence.disabled()
        self.recorder = Recorder(config.record, config.model_name)

    def drain(self, cid: str) -> Drained:
        """Apply every input waiting for ``cid``, in order.

        Returns 0 at once when another worker holds the conversation (it will see our input: the commit that
        empties the mailbox also gives the lease up, atomically), when nothing waits, or when the head input
        waits for a scheduled retry or for the rest of a burst's quiet period. Raises :class:`RetryLater` when
        the model is unavailable; the input stays at the head of the mailbox and the lease is given up so the retry
        (or the sweeper) resumes it.
        """
        kept = self.residents.entry(cid)
        begin = self.store.begin(cid, self.config.lease_ms, peek=self.config.burst.peek, have=kept[0] if kept else "")
        if begin.status != "ok" or begin.snapshot is None:
            return Drained(0)
        token, lease_ms = begin.token, self.config.lease_ms
        snap: Snapshot | None = begin.snapshot
        attempts = begin.attempts
        run: _Run | None = None
        try:
            with self.heartbeat.holding(lambda: self.store.renew_lease(cid, token, lease_ms),
                                        lambda: self.store.release(cid, token), "drain") as beat:
                run = _Run(cid, token, beat, kept, started=time.monotonic())
                while snap is not None:
                    result = self._apply(run, snap, attempts)
                    if result is None:  # a burst still being typed: put off, the lease given up
                        break
                    metrics.MAILBOX_DEPTH.set(result.depth)
                    snap, attempts = result.next, result.next_attempts  # None: the mailbox emptied, lease given up
                    if snap is not None and self._had_its_share(run):
                        self._hand_back(run, snap)
                        break
        except StaleLeaseError:  # the release above was a no-op: the fence is no longer ours
            metrics.STALE_COMMITS.inc()
            log.warning("lease lost; another worker owns the conversation", extra={"conversation_id": cid})
            return Drained(run.applied if run else 0)
        assert run is not None  # the body ran
        return Drained(run.applied, run.replied, run.delivery, run.reply)

    def ask_compaction(self, run: _Run) -> None:
        """A commit left the state over its compaction threshold: a compact task now, so the summary is computed
        while the drain goes on (the splice keeps the turns applied meanwhile), but only the first time in a drain:
        a flood of turns would otherwise publish one task per turn, all but one finding the flag set."""
        if not run.compact:
            run.compact = True
            self.wake("compact", run.cid)

    def _had_its_share(self, run: _Run) -> bool:
        """Whether this drain applied as many inputs, or ran as long, as one conversation may before the others
        waiting in the queue get a turn (fair scheduling)."""
        limit, seconds = self.config.drain_max_turns, self.config.drain_max_seconds
        return bool((limit and run.applied >= limit) or (seconds and time.monotonic() - run.started >= seconds))

    def _hand_back(self, run: _Run, snap: Snapshot) -> None:
        """Give the conversation back to the queue with inputs waiting: the lease goes (the attempt the commit counted
        at the new head given back, nothing held), then a new wake-up queues the conversation behind the others. A
        crash between the two leaves it unleased with inputs waiting, which the sweeper finds."""
        with run.beat.committing():
            self.store.defer(run.cid, run.token, snap.input_id or "", 0)
            run.beat.end()
        metrics.DRAIN_YIELDS.inc()
        self.wake("drain", run.cid)

    def _apply(self, run: _Run, snap: Snapshot, attempts: int) -> CommitResult | None:
        raw, input_id = snap.input or b"", snap.input_id or ""
        try:
            env = decode_envelope(raw)
            if env.message_id != input_id or env.conversation_id != run.cid:
                raise EnvelopeError("envelope does not belong to this mailbox entry")
        except EnvelopeError as exc:
            return self._dead_input(run, snap, "malformed", "malformed", str(exc), attempts)
        if attempts > self.config.max_attempts:
            return self._dead_input(run, snap, env.kind, "too_many_attempts",
                                    f"gave up after {attempts - 1} attempts that crashed the worker", attempts - 1)
        try:
            return self._apply_envelope(run, env, snap)
        except InputError as exc:
            return self._dead_input(run, snap, env.kind, "invalid_input", str(exc), attempts)
        except ContextLengthError as exc:
            return self._context_too_long(run, env, snap, attempts, exc)
        except ModelError as exc:
            return self._model_failed(run, env, snap, attempts, exc)

    def state_of(self, run: _Run, snap: Snapshot) -> State:
        """The snapshot's state: what this worker holds decoded when it is the stored one (same tag), else the blob."""
        if run.kept is not None and snap.tag and run.kept[0] == snap.tag:
            return run.kept[1]
        if snap.state is None and snap.tag:
            raise RuntimeError(f"the store withheld state {snap.tag} of {run.cid}, which this worker does not hold")
        return snap.state

    def _apply_envelope(self, run: _Run, env: Envelope, snap: Snapshot) -> CommitResult | None:
        state, version = self.state_of(run, snap), snap.version
        if env.kind == "message":
            return self._chat_turn(run, Pending(env.message_id, env), snap)
        if env.kind == "notice":
            return self._notice(run, env, version, env.text or "", "producer")
        if env.kind == "event":
            result = self.chat.apply_event(state, env.text or "", pinned=env.pinned, from_player=bool(env.from_player))
            state, version = self._quarantine_if(run, state, version, result.state_problem)
            done = self._commit(run, version, env, result.state, None, {"event": env.text},
                                resident=result.resident, record=self.recorder.applied("event", run.cid, [env]))
            metrics.INPUTS.labels("event", "applied").inc()
            count_pinned_dropped(result.pinned_dropped)
            if result.needs_compaction:
                self.ask_compaction(run)
            return done
        if env.kind == "reset":
            done = self._commit(run, version, env, b"", None, {"reset": True},
                                record=self.recorder.applied("reset", run.cid, [env]))
            metrics.INPUTS.labels("reset", "applied").inc()
            return done
        return self._splice(run, env, state, version)

    def _chat_turn(self, run: _Run, head: Pending, snap: Snapshot) -> CommitResult | None:
        """A chat message at the head: the turn takes in the burst it starts, or is put off while the player is
        still typing (``None``)."""
        # The journal makes a retried turn reuse the inputs, model rounds and tool results a crashed run recorded.
        journal = StoreJournal(self.store, run.cid, head.id, run.token, empty=not snap.journal)
        inputs = self._burst_for(run, head, snap, journal)
        if inputs is None:
            return None
        return TurnRunner(self, run, journal).run(inputs, snap)

    def _burst_for(self, run: _Run, head: Pending, snap: Snapshot,
                   journal: StoreJournal) -> tuple[Pending, ...] | None:
        policy = self.config.burst
        if policy.peek == 0:
            return (head,)
        after = burst.decode_after(snap.after, run.cid)
        ids = journal.recorded_burst()
        if ids is not None:
            again = burst.recorded(head, after, ids)
            if again is not None:
                return again
        if journal.has_entries():
            return (head,)  # a crashed run of a lone message: replay it as it was
        decision = burst.decide(head, after, policy, time.time(), complete=len(snap.after) < policy.peek)
        if decision.wait > 0:
            self._defer(run, head, decision)
            return None
        if len(decision.inputs) > 1:
            journal.record_burst([p.id for p in decision.inputs])
        return decision.inputs

    def _defer(self, run: _Run, head: Pending, decision: burst.Decision) -> None:
        """Put the turn off without holding a worker: give the lease up and hold the conversation for the rest of
        the quiet period, then a scheduled wake-up drains it (the sweeper, should that wake-up be lost)."""
        hold_ms = int(decision.wait * 1000) - 100  # ends just before the wake-up, which then finds it gone
        with run.beat.committing():
            self.store.defer(run.cid, run.token, head.id, max(1, hold_ms))
            run.beat.end()
        metrics.BURST_DEFERRALS.inc()
        self.wake("drain", run.cid, countdown=decision.wait)
        # The player sees their messages read and someone typing while the burst waits (best effort, off-thread).
        self.presence.acknowledge(run.cid, [p.id for p in decision.inputs if p.env.kind == "message"])

    def _notice(self, run: _Run, env: Envelope, version: int, text: str, why: str,
                also: Sequence[Envelope] = ()) -> CommitResult:
        """A fixed short answer in the place of the input (and of the inputs ``also`` after it, a burst): no model
        call, the state unchanged."""
        last = also[-1] if also else env
        record = ReplyRecord(reply_id=env.message_id, conversation_id=run.cid, recipient=last.recipient or run.cid,
                             parts=split_message(text), reply_to=last.reply_to)
        data = record.to_bytes()
        done = self._commit(run, version, env, None, data, {"notice": why, "reply": text},
                            claim_delivery=self.config.deliver_inline, also=[e.message_id for e in also],
                            record=self.recorder.applied("notice", run.cid, [env, *also], record, why=why))
        metrics.INPUTS.labels(env.kind, "applied").inc(1 + len(also))
        metrics.NOTICES.labels(why).inc()
        self.after_reply(run, done, (data, record))
        return done

    def after_reply(self, run: _Run, done: CommitResult, reply: Written | None = None) -> None:
        """A commit queued a reply (``reply``, when the caller has it decoded): deliver it in this task when the
        drain ends here, else alongside."""
        if done.next is None:
            run.replied = True
            run.delivery = done.delivery
            run.reply = reply
        else:
            self.wake("deliver", run.cid)  # more inputs wait: deliver without holding the next turn up

    def _splice(self, run: _Run, env: Envelope, state: State, version: int) -> CommitResult:
        result = self.chat.splice(state, env.state or b"")
        new_state = result.state if result.applied else None
        # The summariser's tokens were spent whether or not the splice still applies: they count either way.
        spent = env.spent
        usage: dict[str, Any] = {} if spent is None else {"usage": spent.model_dump(exclude={"model"}),
                                                          "model": spent.model}
        done = self._commit(run, version, env, new_state, None,
                            {"splice": result.applied, "reason": result.reason, "kept_new": result.kept_new_messages},
                            record=self.recorder.applied("compaction", run.cid, [], applied=result.applied,
                                                         reason=result.reason, kept_new=result.kept_new_messages,
                                                         **usage),
                            tokens=spent.total if spent else 0)
        self.store.clear_compacting(run.cid)
        metrics.COMPACTIONS.labels("spliced" if result.applied else "stale").inc()
        if result.applied:  # a stale splice changed nothing, so it dropped nothing
            count_pinned_dropped(result.pinned_dropped)
        return done

    def _quarantine_if(self, run: _Run, state: State, version: int, problem: Any) -> tuple[State, int]:
        if problem is None or not isinstance(state, bytes) or not state:  # a kept state decoded: no problem
            return state, version
        log.warning("unusable state quarantined; starting fresh",
                    extra={"conversation_id": run.cid, "reason": problem.reason, "detail": problem.detail})
        metrics.QUARANTINED.labels(problem.reason).inc()
        version = self.store.quarantine(run.cid, run.token, state, f"{problem.reason}: {problem.detail}",
                                        expected_version=version)
        self._keep(run, "", None)
        return None, version

    def _commit(self, run: _Run, version: int, env: Envelope, new_state: bytes | None, reply: bytes | None,
                trace: dict[str, Any], *, claim_delivery: bool = False, also: Sequence[str] = (),
                resident: Resident | None = None, record: bytes | None = None, tokens: int = 0) -> CommitResult:
        """``resident``: ``new_state`` decoded, kept for the next turn when the commit lands; ``record``: the
        durable record's entry (see :class:`~worker.service.recording.Recorder`)."""
        entry = {"at": time.time(), "id": env.message_id, "kind": env.kind, **trace}
        done = self._store_commit(run, version, env.message_id, new_state=new_state, reply=reply,
                                  trace=msgpack.packb(entry, use_bin_type=True), dead=None,
                                  claim_delivery_ms=self.config.lease_ms if claim_delivery else 0, also=also,
                                  record=record, tokens=tokens)
        if new_state is not None:
            self._keep(run, done.tag, resident)
        return done

    def _keep(self, run: _Run, tag: str, resident: Resident | None) -> None:
        """The stored state is now ``tag`` (``''``: none): keep ``resident`` as it, or forget what was kept."""
        run.kept = (tag, resident) if tag and resident is not None else None
        self.residents.put(run.cid, tag, resident)

    def _dead_input(self, run: _Run, snap: Snapshot, kind: str, reason: str, detail: str,
                    attempts: int) -> CommitResult:
        """Dead-letter the head input; ``kind`` is the envelope's, or ``malformed`` when it did not decode."""
        input_id = snap.input_id or ""
        log.error("input dead-lettered", extra={"conversation_id": run.cid, "message_id": input_id, "reason": reason,
                                                "detail": detail})
        metrics.DEAD_LETTERS.labels("input", reason).inc()
        metrics.INPUTS.labels(kind, "dead").inc()
        dead = DeadLetter(what="input", id=input_id, reason=reason, detail=detail[:2000], payload=snap.input or b"",
                          attempts=attempts)
        entry = {"at": time.time(), "id": input_id, "dead": reason, "detail": detail[:500]}
        apology = self._apology(run, snap)
        done = self._store_commit(run, snap.version, input_id, new_state=None, reply=apology,
                                  trace=msgpack.packb(entry, use_bin_type=True), dead=dead.to_bytes(),
                                  claim_delivery_ms=self.config.lease_ms if apology and self.config.deliver_inline
                                  else 0, record=self.recorder.dead(run.cid, input_id, snap.input, reason, detail,
                                                                    apology))
        if apology:
            self.after_reply(run, done)
        return done

    def _apology(self, run: _Run, snap: Snapshot) -> bytes | None:
        """The configured apology for a player's dead-lettered chat message: never silence. Inputs that are not
        a player's message (events, resets, one that does not decode) get none."""
        if not self.config.dead_letter_reply:
            return None
        try:
            env = decode_envelope(snap.input or b"")
        except EnvelopeError:
            return None
        if env.kind != "message" or env.conversation_id != run.cid:
            return None
        return ReplyRecord(reply_id=env.message_id, conversation_id=run.cid, recipient=env.recipient or run.cid,
                           parts=[self.config.dead_letter_reply], reply_to=env.reply_to).to_bytes()

    def _store_commit(self, run: _Run, version: int, input_id: str, *, new_state: bytes | None,
                      reply: bytes | None, trace: bytes, dead: bytes | None, claim_delivery_ms: int = 0,
                      also: Sequence[str] = (), record: bytes | None = None, tokens: int = 0) -> CommitResult:
        """The commit, with the heartbeat held off while it runs and stopped when it gave the lease up."""
        with run.beat.committing():
            done = self.store.commit(run.cid, run.token, expected_version=version, input_id=input_id,
                                     new_state=new_state, reply=reply, trace=trace, dead=dead,
                                     lease_ms=self.config.lease_ms, claim_delivery_ms=claim_delivery_ms,
                                     also=also, peek=self.config.burst.peek, record=record, tokens=tokens)
            if done.next is None:
                run.beat.end()
        run.applied += 1 + len(also)
        return done
