"""What a drain does when the model fails: retry later, hold, recover from an over-long prompt, or give up.

Kept apart from :mod:`worker.service.drain` because each failure has its own budget and its own reason, and
together they are most of the drain's decisions: an outage is retried with backoff (the input stays at the head),
an answer Parley cannot read gets a small budget of its own, a rejected API key holds every conversation as an
outage would (players' messages are never dead-lettered for an operator's mistake), and a prompt longer than the
model's window is compacted under the lease and the turn run once more.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Generic, Protocol, TypeVar

from worker import metrics
from worker.conversation.chat import Chat, State
from worker.envelopes import Envelope
from worker.errors import (
    AuthenticationError,
    ContextLengthError,
    InputError,
    MediaTokenError,
    ModelError,
    ModelResponseError,
)
from worker.service.config import ServiceConfig
from worker.service.media import hold_for_token
from worker.service.recovery import compact_for_context, hold_for_auth, retry_later
from worker.store.protocol import DrainStore
from worker.store.results import CommitResult, Snapshot

log = logging.getLogger("parley.service")


class _Run(Protocol):
    """What the failure handling needs of a drain in progress: the conversation and the lease's token."""

    cid: str
    token: int


RunT = TypeVar("RunT", bound=_Run)


class ModelFailures(Generic[RunT]):
    """The drainer's handling of model failures (a mixin of :class:`~worker.service.drain.Drainer`, which
    provides the store, the chat, the config, dead-lettering and applying an envelope)."""

    store: DrainStore
    chat: Chat
    config: ServiceConfig

    def _dead_input(self, run: RunT, snap: Snapshot, kind: str, reason: str, detail: str,
                    attempts: int) -> CommitResult:
        raise NotImplementedError

    def state_of(self, run: RunT, snap: Snapshot) -> State:
        raise NotImplementedError

    def _apply_envelope(self, run: RunT, env: Envelope, snap: Snapshot) -> CommitResult | None:
        raise NotImplementedError

    def _model_failed(self, run: RunT, env: Envelope, snap: Snapshot, attempts: int,
                      exc: ModelError) -> CommitResult:
        """Retry a retryable model failure later (the input stays at the head), up to its budget; past it, or
        for a permanent failure, dead-letter the input so the inputs behind it proceed.

        An answer Parley cannot read (:class:`ModelResponseError`) gets a small budget of its own
        (``max_bad_response_retries``, counted apart from the input's retries through an outage, which would
        otherwise use it up): a provider that sends garbage rarely mends within the minutes an outage may last,
        and the player's next messages wait.
        """
        if isinstance(exc, AuthenticationError):
            hold_for_auth(self.store, self.config, run.cid, run.token, env, exc)
        if isinstance(exc, MediaTokenError):  # WhatsApp's token, for a photo: held the same way
            hold_for_token(self.store, self.config, run.cid, run.token, env, exc)
        reason = "model_rejected"
        if exc.retryable:
            bad_response = isinstance(exc, ModelResponseError)
            # Not a crash: give the attempt back and count a retry against its own, larger budget.
            retries = self.store.note_retry(run.cid, run.token, env.message_id, bad_response=bad_response)
            limit = self.config.max_bad_response_retries if bad_response else self.config.max_model_retries
            if retries <= limit:
                log.warning("model unavailable; will retry", extra={"conversation_id": run.cid, "kind": env.kind,
                                                                    "message_id": env.message_id, "retry": retries,
                                                                    "error": str(exc)})
                metrics.INPUTS.labels(env.kind, "retry").inc()
                retry_later(self.store, self.config, run.cid, retries, f"model unavailable: {exc}",
                            getattr(exc, "retry_after", None))
            reason = "model_bad_response" if bad_response else "model_unavailable"
        return self._dead_input(run, snap, env.kind, reason, str(exc), attempts)

    def _context_too_long(self, run: RunT, env: Envelope, snap: Snapshot, attempts: int,
                          exc: ContextLengthError) -> CommitResult | None:
        """The prompt was longer than the model takes: compact the conversation now, under the lease (the
        configured chain; if none of its triggers fired, drop the oldest exchanges down to half the prompt),
        and run the turn once more on the compacted state, which the turn's commit then saves. Still too
        long, or nothing left to drop: dead-letter the input with the reason, so the inputs behind it go on.
        Any other model failure of the retry is handled as usual (the retry later starts over)."""
        compacted = compact_for_context(self.chat, self.state_of(run, snap))
        if compacted is None:
            metrics.CONTEXT_OVERFLOWS.labels("dead").inc()
            return self._dead_input(run, snap, env.kind, "context_length",
                                    f"{exc} (nothing left to compact)", attempts)
        log.warning("prompt longer than the model's context window; compacted, retrying the turn once",
                    extra={"conversation_id": run.cid, "message_id": env.message_id, "error": str(exc)})
        try:
            # No tag: the compacted blob is not the stored state this worker may hold decoded.
            done = self._apply_envelope(run, env, replace(snap, state=compacted, tag=""))
        except ContextLengthError as again:
            metrics.CONTEXT_OVERFLOWS.labels("dead").inc()
            return self._dead_input(run, snap, env.kind, "context_length",
                                    f"still too long after compaction: {again}", attempts)
        except InputError as bad:
            return self._dead_input(run, snap, env.kind, "invalid_input", str(bad), attempts)
        except ModelError as other:
            return self._model_failed(run, env, snap, attempts, other)
        metrics.CONTEXT_OVERFLOWS.labels("recovered").inc()
        return done
