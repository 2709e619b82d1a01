"""Delivering replies: the deliverer takes a conversation's delivery lease and sends its outbox, in order.

Reply once: delivery marks a part in flight before the HTTP call and sent right after it, and sends it with callback
data naming it; a crash between the two is detected on the next attempt, and :mod:`worker.service.deliver.inflight` decides
whether the part is resent (counted) or, because a status webhook showed it reached WhatsApp, marked sent. Failed
sends of a reply are counted in Redis with the reply (not in task arguments), so the retry limit holds whichever
task, turn or sweep resumes it.

The platform's rules: a windowed channel (WhatsApp) is given the player's last message time and decides itself
between the text, the template and :class:`~worker.errors.OutsideWindowError` (dead-lettered as ``outside_window``);
a channel that keeps a pace (WhatsApp's sender, :mod:`worker.channels.pacing`) takes it before each API call, and its
long waits end the delivery with :class:`RetryLater` without counting a failure.

Two failures are not the reply's: a rejected access token (:class:`~worker.errors.WhatsAppTokenError`) holds the
conversation's delivery, nothing counted against the reply and nothing dead-lettered, retried with backoff (up to
``max_retry_delay``) until the token works, when delivery resumes in order (the alarm is
:mod:`worker.channels.token`'s). A send whose outcome is unknown (:class:`~worker.errors.SendOutcomeUnknownError`: it
timed out after the request went out) keeps its in-flight mark, so the next attempt settles it as a crash-window part
(:mod:`worker.service.deliver.inflight`) instead of resending it at once.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial

from worker import metrics
from worker.channels.channel import Channel, RichChannel, Sent, WindowedChannel
from worker.durable_record import entries
from worker.envelopes.inputs import DeadLetter, ReplyRecord, decode_reply, part_callback
from worker.envelopes.reply_parts import ReactionPart, render
from worker.errors import (
    DeliveryPermanentError,
    DeliveryRetryableError,
    EnvelopeError,
    OptedOutError,
    OutsideWindowError,
    RetryLater,
    SendOutcomeUnknownError,
    WhatsAppTokenError,
)
from worker.observability import tracing
from worker.service.config import ServiceConfig
from worker.service.deliver.inflight import CrashedSends
from worker.service.heartbeat import Beat, Heartbeat
from worker.store.answers import OutboxHead
from worker.store.interfaces import DeliveryStore

log = logging.getLogger("parley.service")

# Bound once: looking a labelled child up costs more than the increment (every part sent).
_SENT = metrics.DELIVERIES.labels("sent")


def _send_span(cid: str, record: ReplyRecord, part: int) -> AbstractContextManager[tracing.Span]:
    """The span of one part's send, in the trace of the commit that queued the reply (a no-op when traces are off)."""
    if not tracing.enabled():
        return tracing.span("send")
    sending = record.parts[part]
    return tracing.span("send", parent=record.traceparent, kind="client", attributes={
        "gen_ai.conversation.id": cid, "parley.reply.id": record.reply_id, "parley.reply.part": part,
        "parley.reply.part_type": "text" if isinstance(sending, str) else sending.type})


@dataclass
class DeliveryRun:
    """One deliver call: the conversation and its delivery lease."""

    cid: str
    token: int
    beat: Beat


class Deliverer:
    """Sends a conversation's waiting replies part by part, in order, through the channel."""

    def __init__(self, store: DeliveryStore, channel: Channel, config: ServiceConfig,
                 heartbeat: Heartbeat) -> None:
        self.store = store
        self.channel = channel
        self.config = config
        self.heartbeat = heartbeat
        self.crashed = CrashedSends(store, config)
        # Checked once: an isinstance against a runtime Protocol walks its members (tens of µs a reply).
        self.windowed: WindowedChannel | None = channel if isinstance(channel, WindowedChannel) else None
        self.rich: RichChannel | None = channel if isinstance(channel, RichChannel) else None

    def deliver(self, cid: str, claimed: tuple[int, OutboxHead] | None = None,
                reply: tuple[bytes, ReplyRecord] | None = None) -> int:
        """Send every reply waiting in ``cid``'s outbox, part by part, in order; returns parts sent.

        Raises :class:`RetryLater` on throttling or channel failure (once a reply has failed
        ``delivery_max_attempts`` times it is dead-lettered instead). Permanent errors dead-letter the reply at
        once and go on. Redis round trips: one to start (lease and claim), one before each further part (the
        in-flight mark) and one after each reply (sent mark, plus the claim of the next reply or the release of
        the lease). ``claimed`` is a start already made (the token and claimed head from the commit that ended
        a drain): then there is no round trip to start. ``reply`` is a reply the caller just queued, as written and
        as its record: when it comes up, it is sent from that record instead of decoded again.
        """
        head: OutboxHead | None
        if claimed is not None:
            token, head = claimed
        else:
            maybe_token, head = self.store.begin_delivery(cid, self.config.drain.lease_ms)
            if maybe_token is None:
                return 0
            token = maybe_token
        lease_ms = self.config.drain.lease_ms
        sent = 0
        with self.heartbeat.holding(lambda: self.store.renew_delivery_lease(cid, token, lease_ms),
                                    lambda: self.store.release_delivery(cid, token), "delivery") as beat:
            run = DeliveryRun(cid, token, beat)
            while head is not None:
                n, head = self._deliver_head(run, head, reply)
                sent += n
        return sent

    def _deliver_head(self, run: DeliveryRun, head: OutboxHead,
                      known: tuple[bytes, ReplyRecord] | None = None) -> tuple[int, OutboxHead | None]:
        """Send the claimed head reply from its next part; returns the parts sent and the next claimed head. ``known``:
        a reply as written and decoded; used when the head is those very bytes (the decoding would give it again)."""
        try:
            record = known[1] if known is not None and head.record == known[0] else decode_reply(head.record)
            if head.part >= len(record.parts):
                raise EnvelopeError(f"reply has {len(record.parts)} part(s); nothing left at part {head.part}")
        except EnvelopeError as exc:
            dead = DeadLetter(what="reply", id=head.reply_id, reason="malformed", detail=str(exc),
                              payload=head.record)
            self.store.dead_letter_reply(run.cid, run.token, head.reply_id, dead.to_bytes(),
                                         entries.failed(run.cid, head.reply_id, "malformed"))
            return 0, self._claim(run, partial(self.store.claim_next, run.cid, run.token, self.config.drain.lease_ms))
        if head.crashed_in_window:
            provider_id = self.crashed.settle(run.cid, run.token, record.reply_id, head.part)  # or RetryLater
            if provider_id is not None:
                return self._skip_sent_part(run, record, head, provider_id)
        return self._send_record(run, record, head.part, head.last_inbound)

    def _skip_sent_part(self, run: DeliveryRun, record: ReplyRecord, head: OutboxHead,
                        provider_id: str) -> tuple[int, OutboxHead | None]:
        """Mark ``part`` (in flight, known to have reached the provider) sent without sending it, then go on with
        the rest of the reply, or with the next reply when it was the last part."""
        cid, token, lease_ms, part = run.cid, run.token, self.config.drain.lease_ms, head.part
        if part == len(record.parts) - 1:
            return 0, self._claim(run, partial(self.store.sent_last_claim_next, cid, token, record.reply_id,
                                               provider_id, lease_ms, entries.sent(cid, record.reply_id)))
        self.store.mark_sent(cid, token, record.reply_id, part, provider_id, lease_ms)
        self.store.mark_inflight(cid, token, record.reply_id, part + 1)
        return self._send_record(run, record, part + 1, head.last_inbound)

    def _send_record(self, run: DeliveryRun, record: ReplyRecord, start: int,
                     inbound: float | None) -> tuple[int, OutboxHead | None]:
        """Send ``record`` from part ``start`` (already claimed: marked in flight); returns the parts sent and
        the next claimed head (None when the outbox is empty and the lease was given up). ``inbound``: when the
        player last wrote, as the claim read it (the time only moves forward, so a stale read can only be stricter);
        only a windowed channel looks at it."""
        cid, token, lease_ms = run.cid, run.token, self.config.drain.lease_ms
        last = len(record.parts) - 1
        # The recipient resolved now: a number or user id that changed since the reply was queued.
        recipient = self.store.recipient_now(cid, record.recipient)
        for part in range(start, len(record.parts)):
            if part > start:
                if self.config.delivery.part_interval:
                    time.sleep(self.config.delivery.part_interval)
                self.store.mark_inflight(cid, token, record.reply_id, part)
            try:
                with _send_span(cid, record, part):
                    sent = self._send_part(cid, record, part, inbound, recipient)
            except RetryLater:  # the pace: nothing went out, and our own pacing is no failure of the reply
                self.store.clear_inflight(cid, token)
                raise
            except WhatsAppTokenError as exc:  # refused before it went anywhere; the operator's to fix, not the reply's
                self.store.clear_inflight(cid, token)
                metrics.DELIVERIES.labels("held").inc()
                raise RetryLater(f"WhatsApp rejected the access token: {exc}", self._held_for(exc)) from exc
            except DeliveryRetryableError as exc:
                if not isinstance(exc, SendOutcomeUnknownError):
                    self.store.clear_inflight(cid, token)  # else kept: the next attempt settles it as a crash's
                metrics.DELIVERIES.labels("unknown" if isinstance(exc, SendOutcomeUnknownError) else "retry").inc()
                failures = self.store.note_delivery_failure(cid, token, record.reply_id)
                if failures < self.config.delivery.max_attempts:
                    raise RetryLater(f"channel unavailable: {exc}",
                                     exc.retry_after or min(300.0, 2.0 ** failures)) from exc
                self._dead_reply(run, record, f"gave up after {failures} attempts: {exc}", exc.code)
                return part - start, self._claim(run, partial(self.store.claim_next, cid, token, lease_ms))
            except DeliveryPermanentError as exc:
                self.store.clear_inflight(cid, token)
                # outside_window, or outside_window:131047 when the API said so rather than the recorded time.
                reason = "opted_out" if isinstance(exc, OptedOutError) else None
                if isinstance(exc, OutsideWindowError):
                    reason = f"outside_window:{exc.code}" if exc.code else "outside_window"
                self._dead_reply(run, record, str(exc), exc.code, reason=reason)
                return part - start, self._claim(run, partial(self.store.claim_next, cid, token, lease_ms))
            _SENT.inc()
            if part == 0 and record.accepted_at is not None:
                metrics.REPLY_LATENCY.observe(max(0.0, time.time() - record.accepted_at))
            if part == last or sent.rest:
                return part - start + 1, self._claim(run, partial(
                    self.store.sent_last_claim_next, cid, token, record.reply_id, sent.message_id, lease_ms,
                    entries.sent(cid, record.reply_id)))
            self.store.mark_sent(cid, token, record.reply_id, part, sent.message_id, lease_ms)
        raise AssertionError("unreachable: the last part returns")  # pragma: no cover

    def _send_part(self, cid: str, record: ReplyRecord, part: int, inbound: float | None, recipient: str) -> Sent:
        """One API call (two when a windowed channel answers a closed window with the template), each paced by the
        channel that keeps a pace; the part goes with callback data naming it, which its status webhooks carry back
        (see inflight)."""
        # A reaction names the player's message wherever it stands in the reply; other parts quote it only first.
        reacts = isinstance(record.parts[part], ReactionPart)
        reply_to = record.reply_to if part == 0 or reacts else None
        if reacts and reply_to is None:  # a reply that answers no message (an operator's): the player's latest
            reply_to = self.store.last_message(cid)
        callback = part_callback(cid, record.reply_id, part, tracing.current())
        if self.windowed is not None:  # the opt-outs are read only when a template would go
            return self.windowed.send_reply(recipient, record.parts[part:], reply_to=reply_to, last_inbound=inbound,
                                           callback_data=callback, templates=partial(self.store.templates_allowed, cid))
        sending = record.parts[part]
        if isinstance(sending, str) or self.rich is None:
            return Sent(self.channel.send_text(recipient, render(sending), reply_to=reply_to, callback_data=callback))
        return Sent(self.rich.send_part(recipient, sending, reply_to=reply_to, callback_data=callback))

    def _held_for(self, exc: WhatsAppTokenError) -> float:
        """Seconds until the held delivery probes the token again: exponential in the refusals in a row, with
        jitter (so held conversations do not all probe at once), up to ``max_retry_delay``."""
        backoff = min(self.config.drain.max_retry_delay, 2.0 ** min(exc.refusals, 10))
        return backoff * (0.5 + random.random() / 2)

    @staticmethod
    def _claim(run: DeliveryRun, claim: Callable[[], OutboxHead | None]) -> OutboxHead | None:
        """Claim the next head, or give the delivery lease up when the outbox is empty (then stop renewing it)."""
        with run.beat.committing():
            head = claim()
            if head is None:
                run.beat.end()
        return head

    def _dead_reply(self, run: DeliveryRun, record: ReplyRecord, detail: str, code: int | None, *,
                    reason: str | None = None) -> None:
        """``reason`` names the dead letter (default ``delivery_failed:<code>``); ``detail`` says it in words."""
        named = reason or f"delivery_failed:{code or 'unknown'}"
        log.error("reply dead-lettered", extra={"conversation_id": run.cid, "message_id": record.reply_id,
                                                "reason": named, "detail": detail, "code": code})
        metrics.DELIVERIES.labels("dead").inc()
        metrics.DEAD_LETTERS.labels("reply", reason or str(code or "delivery")).inc()
        dead = DeadLetter(what="reply", id=record.reply_id, reason=named, detail=detail[:2000],
                          payload=record.to_bytes())
        self.store.dead_letter_reply(run.cid, run.token, record.reply_id, dead.to_bytes(),
                                     entries.failed(run.cid, record.reply_id, named))
