"""Applying inputs and delivering replies: the worker's logic, free of Celery.

Tasks in :mod:`tasks` are thin: they build a :class:`ConversationService` once per process and call
:meth:`~ConversationService.drain`, :meth:`~ConversationService.deliver` or :meth:`~ConversationService.compact`,
mapping the exceptions to Celery retries. ``wake`` is how the service asks for follow-up work
(``wake("drain" | "deliver" | "compact", conversation_id)``); the tasks module sends Celery tasks for it.

The guarantees, and where they come from:

- Order and single writer: a per-conversation lease with a fencing token (``store.acquire``); inputs are
  taken from the head of the mailbox one at a time.
- Effect once: the commit script removes the input, records its id as applied and writes the state and the
  reply in one step, refusing a stale token. A redelivered task finds the lease held or the input gone.
- Nothing lost: an input leaves the mailbox only by a commit that applied it or dead-lettered it.
- Reply once: delivery marks a part in flight before the HTTP call and sent right after it; a crash
  between the two is detected on the next attempt, counted, and the part is resent.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Protocol

import msgpack

from worker import metrics
from worker.conversation.chat import Chat, RoundTrip, TurnResult
from worker.delivery.channel import Channel
from worker.delivery.split import split_message
from worker.envelopes import DeadLetter, Envelope, ReplyRecord, decode_envelope, decode_reply
from worker.errors import (
    DeliveryPermanentError,
    DeliveryRetryableError,
    EnvelopeError,
    InputError,
    ModelError,
    StaleLeaseError,
)
from worker.store.redis_store import CommitResult, ConversationStore, OutboxHead

log = logging.getLogger("parley.service")

class Wake(Protocol):
    """How the service asks for follow-up work: ``wake("drain" | "deliver" | "compact", conversation_id)``,
    optionally after ``countdown`` seconds and, for delivery, with the attempt number so far."""

    def __call__(self, kind: str, cid: str, *, countdown: float = 0.0, attempt: int = 0) -> None: ...


@dataclass(frozen=True)
class ServiceConfig:
    """The knobs of the service (built from :class:`worker.settings.Settings`)."""

    system_prompt: str | None = None
    lease_ms: int = 180_000
    max_attempts: int = 5
    max_model_retries: int = 30
    max_retry_delay: float = 60.0
    delivery_max_attempts: int = 8
    delivery_part_interval: float = 0.0
    compaction_flag_ms: int = 300_000
    deliver_inline: bool = True
    log_text: bool = False
    trace_reply_chars: int = 4000


class RetryLater(Exception):
    """Raised when work must be retried later (model or channel unavailable); ``countdown`` in seconds."""

    def __init__(self, reason: str, countdown: float) -> None:
        super().__init__(reason)
        self.reason = reason
        self.countdown = countdown


@dataclass
class _DrainRun:
    """What one drain call did, for what it does after (the service object is shared by threads)."""

    replied: bool = False
    delivery: tuple[int, OutboxHead] | None = None  # the delivery the last commit started, if it did


def _observer(rt: RoundTrip) -> None:
    metrics.LLM_SECONDS.labels(rt.purpose).observe(rt.seconds)
    if rt.usage is not None:
        metrics.TOKENS.labels("in").inc(rt.usage.prompt_tokens)
        metrics.TOKENS.labels("out").inc(rt.usage.completion_tokens)


class ConversationService:
    """The worker's logic over a store, a chat and a delivery channel."""

    def __init__(self, store: ConversationStore, chat: Chat, channel: Channel, wake: Wake,
                 config: ServiceConfig | None = None) -> None:
        self.store = store
        self.chat = chat
        self.channel = channel
        self.wake = wake
        self.config = config or ServiceConfig()
        if chat.observer is None:
            chat.observer = _observer

    # --- applying inputs ---------------------------------------------------------------------------

    def drain(self, cid: str) -> int:
        """Apply every input waiting for ``cid``, in order; returns how many were applied.

        Returns 0 at once when another worker holds the conversation (it will see our input: the commit that
        empties the mailbox also gives the lease up, atomically), when nothing waits, or when the head input
        waits for a scheduled retry. Raises :class:`RetryLater` when the model is unavailable; the input stays
        at the head of the mailbox and the lease is given up so the retry (or the sweeper) resumes it.
        """
        begin = self.store.begin(cid, self.config.lease_ms)
        if begin.status != "ok" or begin.snapshot is None:
            return 0
        token, snap, attempts = begin.token, begin.snapshot, begin.attempts
        applied = 0
        run = _DrainRun()
        try:
            while True:
                result = self._apply(cid, token, snap.input or b"", snap.input_id or "", snap.state, snap.version,
                                     attempts, run)
                applied += 1
                metrics.MAILBOX_DEPTH.set(result.depth)
                if result.next is None:  # the mailbox was empty and the lease given up (or no advance)
                    break
                snap, attempts = result.next, result.next_attempts
        except StaleLeaseError:
            metrics.STALE_COMMITS.inc()
            log.warning("lease lost; another worker owns the conversation", extra={"conversation_id": cid})
            return applied
        except BaseException:
            self.store.release(cid, token, force=True)
            raise
        if run.replied:
            self._deliver_after_drain(cid, run.delivery)
        return applied

    def _deliver_after_drain(self, cid: str, claimed: tuple[int, OutboxHead] | None) -> None:
        """Deliver the replies this drain committed, in this task (one Celery hop fewer per turn), or ask for a
        deliver task when ``deliver_inline`` is off. A failure never fails the drain, which has committed: it
        becomes a scheduled delivery (and the sweeper is the net under that)."""
        if not self.config.deliver_inline:
            self.wake("deliver", cid)
            return
        try:
            self.deliver(cid, claimed=claimed)
        except RetryLater as exc:
            self.wake("deliver", cid, countdown=exc.countdown, attempt=1)
        except Exception as exc:
            log.warning("inline delivery failed; handing it to a deliver task",
                        extra={"conversation_id": cid, "error": f"{type(exc).__name__}: {exc}"})
            try:
                self.wake("deliver", cid, countdown=1.0)
            except Exception:
                log.exception("could not schedule delivery; the sweeper will", extra={"conversation_id": cid})

    def _apply(self, cid: str, token: int, raw: bytes, input_id: str, state: bytes | None, version: int,
               attempts: int, run: _DrainRun) -> CommitResult:
        try:
            env = decode_envelope(raw)
            if env.message_id != input_id or env.conversation_id != cid:
                raise EnvelopeError("envelope does not belong to this mailbox entry")
        except EnvelopeError as exc:
            return self._dead_input(cid, token, version, input_id, "malformed", str(exc), raw, attempts)
        ctx = {"conversation_id": cid, "message_id": env.message_id, "kind": env.kind, "attempt": attempts}
        if attempts > self.config.max_attempts:
            return self._dead_input(cid, token, version, env.message_id, "too_many_attempts",
                                    f"gave up after {attempts - 1} attempts that crashed the worker", raw,
                                    attempts - 1)
        try:
            if env.kind == "message":
                return self._turn(cid, token, env, state, version, ctx, run)
            if env.kind == "event":
                result = self.chat.apply_event(state, env.text or "", pinned=env.pinned)
                state, version = self._quarantine_if(cid, token, state, version, result.state_problem)
                done = self._commit(cid, token, version, env, result.state, None, {"event": self._text(env.text)})
                metrics.INPUTS.labels("event", "applied").inc()
                if result.needs_compaction:
                    self.wake("compact", cid)
                return done
            if env.kind == "reset":
                done = self._commit(cid, token, version, env, b"", None, {"reset": True})
                metrics.INPUTS.labels("reset", "applied").inc()
                return done
            return self._splice(cid, token, env, state, version)
        except InputError as exc:
            return self._dead_input(cid, token, version, env.message_id, "invalid_input", str(exc), raw, attempts)
        except ModelError as exc:
            if exc.retryable:
                # Not a crash: give the attempt back and count a retry against its own, larger budget.
                retries = self.store.note_retry(cid, token, env.message_id)
                if retries <= self.config.max_model_retries:
                    log.warning("model unavailable; will retry", extra={**ctx, "error": str(exc), "retry": retries})
                    metrics.INPUTS.labels(env.kind, "retry").inc()
                    backoff = min(self.config.max_retry_delay, 2.0 ** min(retries, 10))
                    countdown = max(getattr(exc, "retry_after", None) or 0.0, backoff * (0.5 + random.random() / 2))
                    # Expire a little before the scheduled retry fires, so the retry is never turned away.
                    self.store.hold(cid, int(countdown * 1000) - 250)
                    raise RetryLater(f"model unavailable: {exc}", countdown) from exc
            reason = "model_unavailable" if exc.retryable else "model_rejected"
            return self._dead_input(cid, token, version, env.message_id, reason, str(exc), raw, attempts)

    def _turn(self, cid: str, token: int, env: Envelope, state: bytes | None, version: int,
              ctx: dict[str, Any], run: _DrainRun) -> CommitResult:
        started = time.perf_counter()
        result: TurnResult = self.chat.run_turn(state, system=env.system or self.config.system_prompt,
                                                user=env.text or "")
        state, version = self._quarantine_if(cid, token, state, version, result.state_problem)
        record = ReplyRecord(
            reply_id=env.message_id,
            conversation_id=cid,
            recipient=env.recipient or cid,
            parts=split_message(result.reply),
            reply_to=env.reply_to,
        )
        trace = {"user": self._text(env.text), "reply": self._text(result.reply[: self.config.trace_reply_chars]),
                 "finish": result.finish_reason, "model_calls": result.model_calls, "tool_calls": result.tool_calls,
                 "prompt_tokens": result.usage.prompt_tokens if result.usage else None,
                 "reset": result.reset, "parts": len(record.parts)}
        # Inline delivery starts in the commit that ends the drain (if it does): one round trip fewer per reply.
        done = self._commit(cid, token, version, env, result.state, record.to_bytes(), trace,
                            claim_delivery=self.config.deliver_inline)
        metrics.TURN_SECONDS.observe(time.perf_counter() - started)
        metrics.INPUTS.labels("message", "applied").inc()
        log.info("turn applied", extra={**ctx, "parts": len(record.parts), "finish": result.finish_reason})
        if done.next is None:
            run.replied = True  # the drain ends here: deliver in this task once it has
            run.delivery = done.delivery
        else:
            self.wake("deliver", cid)  # more inputs wait: deliver alongside, without holding the next turn up
        if result.needs_compaction:
            self.wake("compact", cid)
        return done

    def _splice(self, cid: str, token: int, env: Envelope, state: bytes | None, version: int) -> CommitResult:
        result = self.chat.splice(state, env.state or b"")
        new_state = result.state if result.applied else None
        done = self._commit(cid, token, version, env, new_state, None,
                            {"splice": result.applied, "reason": result.reason, "kept_new": result.kept_new_messages})
        self.store.clear_compacting(cid)
        metrics.COMPACTIONS.labels("spliced" if result.applied else "stale").inc()
        return done

    def _quarantine_if(self, cid: str, token: int, state: bytes | None, version: int,
                       problem: Any) -> tuple[bytes | None, int]:
        if problem is None or not state:
            return state, version
        log.warning("unusable state quarantined; starting fresh",
                    extra={"conversation_id": cid, "reason": problem.reason, "detail": problem.detail})
        metrics.QUARANTINED.labels(problem.reason).inc()
        version = self.store.quarantine(cid, token, state, f"{problem.reason}: {problem.detail}",
                                        expected_version=version)
        return None, version

    def _commit(self, cid: str, token: int, version: int, env: Envelope, new_state: bytes | None,
                reply: bytes | None, trace: dict[str, Any], *, claim_delivery: bool = False) -> CommitResult:
        entry = {"at": time.time(), "id": env.message_id, "kind": env.kind, **trace}
        return self.store.commit(
            cid, token, expected_version=version, input_id=env.message_id, new_state=new_state, reply=reply,
            trace=msgpack.packb(entry, use_bin_type=True), dead=None, lease_ms=self.config.lease_ms, advance=True,
            claim_delivery_ms=self.config.lease_ms if claim_delivery else 0,
        )

    def _dead_input(self, cid: str, token: int, version: int, input_id: str, reason: str, detail: str,
                    raw: bytes, attempts: int) -> CommitResult:
        log.error("input dead-lettered", extra={"conversation_id": cid, "message_id": input_id, "reason": reason,
                                                "detail": detail})
        metrics.DEAD_LETTERS.labels("input", reason).inc()
        metrics.INPUTS.labels("unknown", "dead").inc()
        dead = DeadLetter(what="input", id=input_id, reason=reason, detail=detail[:2000], payload=raw,
                          attempts=attempts)
        entry = {"at": time.time(), "id": input_id, "dead": reason, "detail": detail[:500]}
        return self.store.commit(cid, token, expected_version=version, input_id=input_id, new_state=None,
                                 reply=None, trace=msgpack.packb(entry, use_bin_type=True), dead=dead.to_bytes(),
                                 lease_ms=self.config.lease_ms, advance=True)

    def _text(self, text: str | None) -> str | None:
        return text

    # --- compaction ----------------------------------------------------------------------------------

    def compact(self, cid: str) -> bool:
        """Compute a compaction off to the side and queue it as a splice input; returns whether one was queued.

        Never blocks a turn: the expensive part (the summariser) runs without the lease; the splice is
        applied in order by the drainer, keeping whatever arrived meanwhile. A failure changes nothing.
        """
        if not self.store.try_mark_compacting(cid, self.config.compaction_flag_ms):
            return False
        queued = False
        try:
            snap = self.store.head(cid)
            if not snap.state or not self.chat.needs_compaction(snap.state):
                return False
            report = self.chat.compact_with_report(snap.state)
            if not report.changed:
                metrics.COMPACTIONS.labels("failed" if report.errors else "noop").inc()
                return False
            metrics.COMPACTION_SAVED.inc(max(0, report.tokens_before - report.tokens_after))
            env = Envelope(kind="splice", conversation_id=cid, message_id=f"compact-{time.time_ns()}",
                           state=report.state)
            self.store.accept(cid, env.to_bytes(), env.message_id, max_inbox=1 << 30)
            queued = True
            self.wake("drain", cid)
            return True
        finally:
            if not queued:
                self.store.clear_compacting(cid)

    # --- delivery ------------------------------------------------------------------------------------

    def deliver(self, cid: str, attempt: int = 0, *, claimed: tuple[int, OutboxHead] | None = None) -> int:
        """Send every reply waiting in ``cid``'s outbox, part by part, in order; returns parts sent.

        Raises :class:`RetryLater` on throttling or channel failure (after ``delivery_max_attempts`` the
        reply is dead-lettered instead). Permanent errors dead-letter the reply at once and go on.
        Redis round trips: one to start (lease and claim), one before each further part (the in-flight mark)
        and one after each reply (sent mark, plus the claim of the next reply or the release of the lease).
        ``claimed`` is a start already made (the token and claimed head from the commit that ended a drain):
        then there is no round trip to start.
        """
        head: OutboxHead | None
        if claimed is not None:
            token, head = claimed
        else:
            maybe_token, head = self.store.begin_delivery(cid, self.config.lease_ms)
            if maybe_token is None:
                return 0
            token = maybe_token
        sent = 0
        try:
            while head is not None:
                try:
                    record = decode_reply(head.record)
                    if head.part >= len(record.parts):
                        raise EnvelopeError(f"reply has {len(record.parts)} part(s); nothing left at part {head.part}")
                except EnvelopeError as exc:
                    dead = DeadLetter(what="reply", id=head.reply_id, reason="malformed", detail=str(exc),
                                      payload=head.record)
                    self.store.dead_letter_reply(cid, token, head.reply_id, dead.to_bytes())
                    head = self.store.claim_next(cid, token, self.config.lease_ms)
                    continue
                if head.crashed_in_window:
                    metrics.DUPLICATE_WINDOW.inc()
                    log.warning("resending a part whose send outcome is unknown (crash in the send window)",
                                extra={"conversation_id": cid, "message_id": record.reply_id, "part": head.part})
                n, head = self._send_record(cid, token, record, head.part, attempt)
                sent += n
            return sent
        except BaseException:
            self.store.release_delivery(cid, token, force=True)
            raise

    def _send_record(self, cid: str, token: int, record: ReplyRecord, start: int,
                     attempt: int) -> tuple[int, OutboxHead | None]:
        """Send ``record`` from part ``start`` (already claimed: marked in flight); returns the parts sent and
        the next claimed head (None when the outbox is empty and the lease was given up)."""
        last = len(record.parts) - 1
        for part in range(start, len(record.parts)):
            if part > start:
                if self.config.delivery_part_interval:
                    time.sleep(self.config.delivery_part_interval)
                self.store.mark_inflight(cid, token, record.reply_id, part)
            try:
                wamid = self.channel.send_text(record.recipient, record.parts[part],
                                               reply_to=record.reply_to if part == 0 else None)
            except DeliveryRetryableError as exc:
                self.store.clear_inflight(cid, token)
                metrics.DELIVERIES.labels("retry").inc()
                if attempt + 1 >= self.config.delivery_max_attempts:
                    self._dead_reply(cid, token, record, f"gave up after {attempt + 1} attempts: {exc}", exc.code)
                    return part - start, self.store.claim_next(cid, token, self.config.lease_ms)
                countdown = exc.retry_after or min(300.0, 2.0 ** (attempt + 1))
                raise RetryLater(f"channel unavailable: {exc}", countdown) from exc
            except DeliveryPermanentError as exc:
                self.store.clear_inflight(cid, token)
                self._dead_reply(cid, token, record, str(exc), exc.code)
                return part - start, self.store.claim_next(cid, token, self.config.lease_ms)
            metrics.DELIVERIES.labels("sent").inc()
            if part == last:
                return part - start + 1, self.store.sent_last_claim_next(cid, token, record.reply_id, wamid, self.config.lease_ms)
            self.store.mark_sent(cid, token, record.reply_id, part, wamid, self.config.lease_ms)
        raise AssertionError("unreachable: the last part returns")  # pragma: no cover

    def _dead_reply(self, cid: str, token: int, record: ReplyRecord, reason: str, code: int | None) -> None:
        log.error("reply dead-lettered", extra={"conversation_id": cid, "message_id": record.reply_id,
                                                "reason": reason, "code": code})
        metrics.DELIVERIES.labels("dead").inc()
        metrics.DEAD_LETTERS.labels("reply", str(code or "delivery")).inc()
        dead = DeadLetter(what="reply", id=record.reply_id, reason=f"delivery_failed:{code or 'unknown'}",
                          detail=reason[:2000], payload=record.to_bytes())
        self.store.dead_letter_reply(cid, token, record.reply_id, dead.to_bytes())

