"""The queue message a game engine publishes for ``parley inlet``: ``{"kind": "message" | "event" | "reset",
"conversation_id", ...the fields of the HTTP body of that kind}`` (the bodies of :mod:`worker.envelopes.producer_bodies`)."""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from worker.envelopes.producer_bodies import KINDS, ProducerBody, field_of
from worker.observability import tracing

#: A queue message's JSON is a producer's body: one flat object, far smaller than this.
MAX_MESSAGE_BYTES = 8 << 20


class Unacceptable(ValueError):
    """A queue message that can never be accepted as it is (moved aside with ``reason``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class QueueMessage:
    kind: str
    conversation_id: str
    body: ProducerBody


def parse_message(raw: bytes | str) -> QueueMessage:
    """The queue message in ``raw``, or :class:`Unacceptable` saying what is wrong (the conversation id itself and
    the text limit are the client's to check, when the input is accepted)."""
    if len(raw) > MAX_MESSAGE_BYTES:
        raise Unacceptable(f"message larger than {MAX_MESSAGE_BYTES} bytes")
    try:
        obj: Any = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise Unacceptable(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise Unacceptable("not a JSON object")
    kind, cid = obj.pop("kind", None), obj.pop("conversation_id", None)
    if kind not in KINDS:
        raise Unacceptable(f"kind: must be one of {', '.join(KINDS)} (got {kind!r})")
    if not isinstance(cid, str):
        raise Unacceptable("conversation_id: a string is required")
    try:
        body = KINDS[kind].model_validate(obj)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        raise Unacceptable(f"{field_of(err['loc']) or 'body'}: {err['msg']}") from None
    return QueueMessage(kind, cid, body)


def entry_span(conversation_id: str, traceparent: object) -> AbstractContextManager[tracing.Span]:
    """The span of one queue message the inlet takes, continuing the producer's trace when the message carries its
    W3C ``traceparent`` (the stream entry's ``traceparent`` field, the AMQP message's ``traceparent`` header); the
    input's accept is its child. A no-op when traces are off."""
    if not tracing.enabled():
        return tracing.span("inlet")
    if isinstance(traceparent, bytes):
        traceparent = traceparent.decode("ascii", "replace")
    return tracing.span("inlet", parent=traceparent if isinstance(traceparent, str) else None, kind="consumer",
                        attributes={"gen_ai.conversation.id": conversation_id})
