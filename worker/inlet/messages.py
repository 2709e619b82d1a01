"""The queue message a game engine publishes for ``parley inlet``: ``{"kind": "message" | "event" | "reset",
"conversation_id", ...the fields of the HTTP body of that kind}`` (the bodies of :mod:`worker.producer_bodies`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from worker.producer_bodies import KINDS, ProducerBody, field_of

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
