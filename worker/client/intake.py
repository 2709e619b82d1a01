"""The second step of the one way in: a checked input (:mod:`worker.client.builder`) accepted into its mailbox, or
held until it is due, and a worker woken when it needs one (:class:`Intake`, ``client.intake``). The client's methods
accept here one at a time; the inlet accepts plain inputs a batch at a time; the HTTP API accepts them on its event
loop (:mod:`worker.client.async_client`) and asks here whether to wake a worker."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from worker.client.builder import CheckedInput
from worker.envelopes.inputs import Envelope, InputKind
from worker.errors import InboxFullError
from worker.observability import tracing
from worker.queue.wakeup import wake_after_accept, wake_needed
from worker.store.answers import AcceptResult

if TYPE_CHECKING:
    from worker.client import ConversationClient


@dataclass(frozen=True)
class Submitted:
    """What a submission did: ``duplicate`` when the message id was seen before (nothing queued); ``scheduled``
    when the input is held until its ``at`` (``depth`` is then 0: nothing joined the mailbox yet)."""

    conversation_id: str
    message_id: str
    duplicate: bool
    depth: int
    scheduled: bool = False


def accept_span(env: Envelope) -> AbstractContextManager[tracing.Span]:
    """The span of an input's accept (a no-op when traces are off): a child of the webhook's or the API's request, or
    the root of the input's trace."""
    return tracing.span("accept", kind="producer", attributes={
        "gen_ai.conversation.id": env.conversation_id, "parley.input.id": env.message_id, "parley.input.kind": env.kind})


class Intake:
    """``client.intake``: checked inputs into their mailboxes (or held until due), through the client's store, its
    accept's own wake-up (:meth:`~worker.client.ConversationClient.accept_wake_push`) and its waker
    (:meth:`~worker.client.ConversationClient.publish_wake`)."""

    def __init__(self, client: ConversationClient) -> None:
        self._client = client

    def accept(self, checked: CheckedInput) -> Submitted:
        """Accept one input now, or hold it until it is due; the worker woken when it needs one (blocking). Raises
        :class:`~worker.errors.InboxFullError` (a full mailbox, too many timers) and
        :class:`~worker.errors.StoreError`."""
        if not tracing.enabled():
            return self._accept(checked)
        with accept_span(checked.envelope) as span:
            done = self._accept(_traced(checked))
            span.set("parley.input.duplicate", done.duplicate)
            return done

    def _accept(self, checked: CheckedInput) -> Submitted:
        env, store = checked.envelope, self._client.store
        cid, data, mid = env.conversation_id, env.to_bytes(), env.message_id
        reset = env.kind is InputKind.RESET
        if checked.due_ms is not None:
            # Held, it never opens WhatsApp's window when it fires: the player did not write at that time.
            held = store.schedule(cid, data, mid, checked.due_ms, reset=reset, ends_burst=env.ends_burst)
            return Submitted(cid, mid, held.duplicate, 0, scheduled=True)
        # A reset joins the order with no timers held behind it (docs/producers.md): its accept drops them in the same
        # step, only when it is accepted (a retry, a duplicate, leaves the timers held since the first one alone).
        result = store.accept(cid, data, mid, inbound=checked.inbound, ends_burst=env.ends_burst,
                              wake=self._client.accept_wake_push(cid), reset=reset)
        return self.answered(checked, result)

    def accept_many(self, inputs: Sequence[CheckedInput]) -> list[Submitted | InboxFullError]:
        """Accept plain inputs (:attr:`CheckedInput.plain <worker.client.builder.CheckedInput.plain>`) in one round
        trip, in this order; an input of a full mailbox answers its :class:`~worker.errors.InboxFullError` in its
        place. Their envelopes carry their traces already (:meth:`traced`)."""
        assert all(checked.plain for checked in inputs), "only a plain input is accepted in a batch"
        results = self._client.store.accept_many(
            [(c.conversation_id, c.envelope.to_bytes(), c.message_id, c.inbound) for c in inputs])
        return [result if isinstance(result, InboxFullError) else self.answered(checked, result)
                for checked, result in zip(inputs, results, strict=True)]

    def traced(self, checked: CheckedInput) -> CheckedInput:
        """``checked`` carrying the trace its drain continues, for an accept made apart (a batch, the event loop): its
        accept span covers the checks, the store's accept follows elsewhere. Unchanged when traces are off."""
        if not tracing.enabled():
            return checked
        with accept_span(checked.envelope):
            return _traced(checked)

    def needs_wake(self, result: AcceptResult) -> bool:
        """Whether a worker must be woken after this accept (:func:`~worker.queue.wakeup.wake_needed`) and the accept
        did not push that wake-up itself."""
        return not result.woken and wake_needed(accepted=result.accepted, was_empty=result.depth == 1,
                                                ended_hold=result.ended_hold,
                                                every=not self._client.coalesce_wakeups)

    def answered(self, checked: CheckedInput, result: AcceptResult) -> Submitted:
        """What the accept of ``checked`` answers, the worker woken first when it needs one (blocking). The input is
        queued by now: a failed wake-up is logged and counted, never raised (:func:`~worker.queue.wakeup.wake_after_accept`)."""
        if self.needs_wake(result):
            wake_after_accept(self._client.publish_wake, checked.conversation_id)
        return Submitted(checked.conversation_id, checked.message_id, result.duplicate, result.depth)


def _traced(checked: CheckedInput) -> CheckedInput:
    """``checked`` carrying the current span's context: the trace its drain, retries and reply continue."""
    return replace(checked, envelope=checked.envelope.model_copy(update={"traceparent": tracing.current()}))
