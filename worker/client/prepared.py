"""An input validated and built by :class:`~worker.client.ConversationClient`'s own methods but not yet accepted:
what lets the HTTP API await the accept on its event loop (:mod:`worker.client.async_client`) and the inlet accept a
batch in one round trip (:mod:`worker.inlet.stream`) without a second copy of the client's checks and defaults."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from worker.client import ConversationClient, Submitted, accept_span, traced
from worker.envelopes.inputs import Envelope
from worker.observability import tracing
from worker.store.answers import AcceptResult

#: The kinds whose client method, for an input not scheduled for later (``at``) and not a game event the model
#: answers (``respond``: its accept also ends a burst's hold and may wake a worker), does nothing but validate, build
#: and accept: only those are prepared and accepted apart. Anything else (a reset, which also drops the
#: conversation's timers; a pause; a scheduled input; an answered event) goes through the client's own method.
PREPARABLE_KINDS = frozenset({"message", "event"})


def preparable(kind: str, arguments: dict[str, Any]) -> bool:
    """Whether the input of ``kind`` with ``arguments`` may be prepared and accepted apart (see above)."""
    return kind in PREPARABLE_KINDS and arguments.get("at") is None and not arguments.get("respond")


@dataclass(frozen=True, kw_only=True)
class Prepared(Submitted):
    """The input (``envelope``) and whether it is the player's (``inbound``); ``duplicate`` and ``depth`` mean
    nothing until it is accepted."""

    envelope: Envelope
    inbound: bool


class _Preparing(ConversationClient):
    """The client's methods, stopping short of the store: they answer a :class:`Prepared`."""

    def _submit(self, env: Envelope, *, from_player: bool = False, **scheduling: Any) -> Submitted:
        # An input scheduled for later is not accepted now: callers send it through the blocking client.
        assert not any(scheduling.values()), "a scheduled input has no accept to prepare"
        return Prepared(env.conversation_id, env.message_id, False, 0, envelope=env,
                        inbound=self._checked(env, from_player=from_player))


class Preparer:
    """``prepare(method, conversation_id, arguments)``: what ``client.<method>(conversation_id, **arguments)`` would
    accept, validated and built (raises :class:`~worker.errors.InputError` as the client does); no I/O."""

    def __init__(self, client: ConversationClient) -> None:
        self.client = client
        self._preparing = _Preparing(client.store, client.publish_wake, max_text_chars=client.max_text_chars,
                                     coalesce_wakeups=client.coalesce_wakeups)

    def prepare(self, method: str, conversation_id: str, arguments: dict[str, Any]) -> Prepared:
        prepared = getattr(self._preparing, method)(conversation_id, **arguments)
        assert isinstance(prepared, Prepared)
        if not tracing.enabled():
            return prepared
        # The accept span covers the checks (the store's accept follows, batched or awaited elsewhere): what matters
        # is that the envelope carries the trace its drain continues.
        with accept_span(prepared.envelope):
            return replace(prepared, envelope=traced(prepared.envelope))

    def needs_wake(self, result: AcceptResult) -> bool:
        """Whether the client would wake a worker after this accept (the first input of a burst), and the accept
        did not push that wake-up itself."""
        return self.client._needs_wake(result) and not result.woken

    def accepted(self, prepared: Prepared, result: AcceptResult) -> Submitted:
        """What the client's method would have answered, the worker woken as it would have been (blocking)."""
        if self.needs_wake(result):
            self.client.publish_wake(prepared.conversation_id)
        return Submitted(prepared.conversation_id, prepared.message_id, result.duplicate, result.depth)
