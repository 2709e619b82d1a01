"""Deciding what the head input of a mailbox comes to, as an outcome the drainer applies.

Reads the store (a turn's journal, the daily tokens, the queue behind a burst) and calls the model, but commits
nothing: an input that does not decode or crashed the worker too often is a dead letter; a chat message is a turn
(:mod:`~worker.service.drain.turn`); a producer's notice, an event, a reset or a compaction's splice are applied
without the model. A model failure becomes what :func:`~worker.service.drain.failures.decide` says: a retry, a
dead letter, or a compaction under the lease and the turn run once more.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from worker import metrics
from worker.conversation.chat import Chat, State
from worker.conversation.message_times import from_seconds
from worker.envelopes.inputs import Envelope, InputKind, decode_envelope
from worker.errors import AuthenticationError, EnvelopeError, InputError, ModelError
from worker.service.config import ServiceConfig
from worker.service.drain import failures, recovery
from worker.service.drain.burst import Pending, answers_event
from worker.service.drain.handoff import speak
from worker.service.drain.hooks.base import Hooks
from worker.service.drain.media import MediaPreparer
from worker.service.drain.outcomes import (
    Answer,
    Applied,
    DeadLettered,
    Defer,
    Notice,
    Outcome,
    Retry,
    Spliced,
    Withheld,
    quarantine_of,
)
from worker.service.drain.run import DrainRun
from worker.service.drain.stored_journal import StoreJournal
from worker.service.drain.turn import TurnRunner
from worker.store.answers import Snapshot
from worker.store.interfaces import DrainStore

log = logging.getLogger("parley.service")


def reset_applied(chat: Chat, env: Envelope, state: State) -> Applied:
    """A producer's reset: the history closes into the archive, as an idle reset's does, or with ``forget`` the
    archive is erased with it."""
    if env.forget:
        return Applied(env, b"", {"reset": True, "forget": True}, erase=True)
    loaded = chat.load(state)
    return Applied(env, b"", {"reset": True}, departed=loaded.state.messages if loaded.problem is None else ())


class Decider:
    """What applying the head input of a drain comes to (see the module docstring)."""

    def __init__(self, store: DrainStore, chat: Chat, config: ServiceConfig, media: MediaPreparer,
                 hooks: Hooks) -> None:
        self.store, self.chat, self.config, self.media, self.hooks = store, chat, config, media, hooks

    def decide(self, run: DrainRun, snap: Snapshot, attempts: int) -> Outcome:
        """The outcome of the head input of ``snap``, at its ``attempts``-th attempt."""
        raw, input_id = snap.input or b"", snap.input_id or ""
        try:
            env = decode_envelope(raw)
            if env.message_id != input_id or env.conversation_id != run.cid:
                raise EnvelopeError("envelope does not belong to this mailbox entry")
        except EnvelopeError as exc:
            return DeadLettered("malformed", "malformed", str(exc), attempts)
        if attempts > self.config.drain.max_attempts:
            return DeadLettered(env.kind, "too_many_attempts",
                              f"gave up after {attempts - 1} attempts that crashed the worker", attempts - 1)
        try:
            return self._envelope(run, env, snap)
        except InputError as exc:
            return DeadLettered(env.kind, "invalid_input", str(exc), attempts)
        except ModelError as exc:
            return self._failed(run, env, snap, attempts, exc)

    def _envelope(self, run: DrainRun, env: Envelope, snap: Snapshot) -> Outcome:
        state = run.state_of(snap)
        if env.kind is InputKind.MESSAGE:
            return self._chat_turn(run, Pending(env.message_id, env), snap)
        if env.kind is InputKind.NOTICE:
            return self.hooks.notice(run, Pending(env.message_id, env)) or Notice(env, env.text or "", "producer")
        held = env.kind is InputKind.OPERATOR or (env.kind is InputKind.EVENT and bool(env.respond))
        if held and self._opted_out(run, env.message_id):  # the business starts nothing for a player who opted out
            return self._held_back(run, env, state)
        if env.kind is InputKind.EVENT and env.respond:
            return self._chat_turn(run, Pending(env.message_id, env), snap)  # the model answers it
        if env.kind is InputKind.EVENT:
            return self._event(env, state, {"event": env.text})
        if env.kind is InputKind.RESET:
            return reset_applied(self.chat, env, state)
        if env.kind is InputKind.OPERATOR:
            return speak(self.chat, state, env, run.cid)
        spliced = self.chat.splice(state, env.state or b"")
        return Spliced(env, spliced.state if spliced.applied else None, spliced.applied, spliced.reason,
                       spliced.kept_new_messages, spliced.pinned_dropped, spliced.departed)

    def _opted_out(self, run: DrainRun, head_id: str) -> bool:
        """Whether the player opted out: as the drain's begin read it, else read now."""
        seen = run.opt_out_for(head_id)
        return self.store.opted_out(run.cid) if seen is None else seen

    def _event(self, env: Envelope, state: State, trace: dict[str, Any]) -> Applied:
        """A game event applied without the model (no reply)."""
        result = self.chat.apply_event(state, env.text or "", pinned=env.pinned, from_player=bool(env.from_player),
                                       key=env.key, at=None if env.sent_at is None else from_seconds(env.sent_at))
        return Applied(env, result.state, trace, result.resident, quarantine_of(state, result.state_problem),
                       result.needs_compaction, result.pinned_dropped, result.departed)

    def _held_back(self, run: DrainRun, env: Envelope, state: State) -> Applied:
        """An answered event or an operator's message for a player who opted out: applied to the state (the event
        as one the model did not answer, the operator's words as said), nothing sent; counted."""
        kind = "operator" if env.kind is InputKind.OPERATOR else "event"
        metrics.OPTED_OUT_SENDS.labels(kind).inc()
        if kind == "event":
            return self._event(env, state, {"event": env.text, "opted_out": True})
        s = speak(self.chat, state, env, run.cid)
        return Applied(env, s.state, {"operator": True, "opted_out": True, "reply": env.text}, s.resident,
                       s.quarantine, s.needs_compaction, s.pinned_dropped, s.departed)

    def _chat_turn(self, run: DrainRun, head: Pending, snap: Snapshot) -> Outcome:
        """A chat message at the head: the turn takes in the burst it starts, or is put off while the player is
        still typing. A game event the model answers: a turn of its own (no burst), through the same hooks."""
        # The journal makes a retried turn reuse the inputs, model rounds and tool results a crashed run recorded.
        journal = StoreJournal(self.store, run.cid, head.id, run.token, empty=not snap.journal)
        taken = (head,) if answers_event((head,)) else self.hooks.take(run, head, snap, journal)
        if isinstance(taken, Defer):
            return taken
        return TurnRunner(self.chat, self.config, self.media, self.hooks, run, journal).run(taken, snap)

    def _failed(self, run: DrainRun, env: Envelope, snap: Snapshot, attempts: int, exc: ModelError, *,
                compacted: bool = False) -> Outcome:
        """A model failure: count the retry it is (the store gives the attempt back), then do as decided."""
        count = failures.counted_as(exc)
        retries = self.store.note_retry(run.cid, run.token, env.message_id,
                                        bad_response=count == "bad_response") if count else 0
        verdict = failures.decide(exc, retries, self.config, compacted=compacted)
        if verdict.action == "compact":
            return self._compacted(run, env, snap, attempts, exc)
        if verdict.action == "dead":
            detail = str(exc)
            if verdict.reason == "context_length":
                metrics.CONTEXT_OVERFLOWS.labels("dead").inc()
                detail = f"still too long after compaction: {exc}"
            return DeadLettered(env.kind, verdict.reason, detail, attempts)
        if verdict.action == "retry":
            log.warning("model unavailable; will retry", extra={"conversation_id": run.cid, "kind": env.kind,
                                                                "message_id": env.message_id, "retry": retries,
                                                                "error": str(exc)})
            metrics.INPUTS.labels(env.kind, "retry").inc()
            return Retry(retries, f"model unavailable: {exc}", getattr(exc, "retry_after", None))
        metrics.INPUTS.labels(env.kind, "held").inc()
        if isinstance(exc, AuthenticationError):
            # Held without end until someone fixes the key; the gauge is 1 until a model call succeeds again.
            metrics.PROVIDER_AUTH_FAILING.set(1)
            metrics.PROVIDER_AUTH_FAILURES.inc()
            recovery.AUTH_ALARM.report(exc)
            return Retry(retries, f"provider rejected the API key: {exc}")
        return Retry(retries, f"WhatsApp rejected the access token for a photo: {exc}")

    def _compacted(self, run: DrainRun, env: Envelope, snap: Snapshot, attempts: int, exc: ModelError) -> Outcome:
        """The prompt was longer than the model takes: compact the conversation now, under the lease (the
        configured chain; if none of its triggers fired, drop the oldest exchanges down to half the prompt), and
        run the turn once more on the compacted state, which the turn's commit then saves. Nothing left to drop,
        or still too long: dead-letter the input, so the inputs behind it go on."""
        compacted = recovery.compact_for_context(self.chat, run.state_of(snap))
        if compacted is None:
            metrics.CONTEXT_OVERFLOWS.labels("dead").inc()
            return DeadLettered(env.kind, "context_length", f"{exc} (nothing left to compact)", attempts)
        log.warning("prompt longer than the model's context window; compacted, retrying the turn once",
                    extra={"conversation_id": run.cid, "message_id": env.message_id, "error": str(exc)})
        try:
            # No tag: the compacted blob is not the stored state this worker may hold decoded.
            outcome = self._envelope(run, env, replace(snap, state=compacted.state, tag=""))
        except InputError as bad:
            return DeadLettered(env.kind, "invalid_input", str(bad), attempts)
        except ModelError as again:
            return self._failed(run, env, snap, attempts, again, compacted=True)
        metrics.CONTEXT_OVERFLOWS.labels("recovered").inc()
        if isinstance(outcome, Answer):
            # The summariser ran for this turn: its tokens count in the day's budget and the record as the turn's.
            compacted.add_to(outcome.trail.usage)
            # What the compaction took out is archived by the turn's commit, which lands it.
            return replace(outcome, result=replace(outcome.result,
                                                   departed=compacted.departed + outcome.result.departed))
        if isinstance(outcome, Withheld):
            return replace(outcome, departed=compacted.departed + outcome.departed)
        return outcome
