"""The first step of the one way in: an input built from a producer's arguments and checked as the client accepts it,
with no I/O (:class:`InputBuilder`, ``client.inputs``). Its accept is the second step (:mod:`worker.client.intake`);
the client's methods, the HTTP API, the inlet and the timers' scheduling all take these two steps."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from worker.envelopes import operator_input
from worker.envelopes.addresses import validate_conversation_id
from worker.envelopes.due_time import due_ms
from worker.envelopes.inputs import (
    MAX_ENVELOPE_BYTES,
    MAX_SYSTEM_CHARS,
    Envelope,
    InputKind,
    Media,
    build_envelope,
)
from worker.envelopes.trace_context import MAX_TRACEPARENT_CHARS
from worker.errors import EnvelopeError, EnvelopeTooLargeError, OversizeInputError

if TYPE_CHECKING:
    from worker.client import ConversationClient


@dataclass(frozen=True)
class CheckedInput:
    """An input built and checked, not yet accepted: its ``envelope``; ``inbound``: it is a message the player sent
    (it opens WhatsApp's 24-hour window when accepted now); ``due_ms``: when it is held until (ms since the epoch),
    None to accept it now."""

    envelope: Envelope
    inbound: bool
    due_ms: int | None = None

    @property
    def conversation_id(self) -> str:
        return self.envelope.conversation_id

    @property
    def message_id(self) -> str:
        return self.envelope.message_id

    @property
    def plain(self) -> bool:
        """Whether its accept is the mailbox's accept and nothing more: not held for later, not ending a burst's quiet
        period (an answered event, a person's message, a reset, which also drops the timers). Only such an input is
        accepted with others in one round trip (the inlet) or on the event loop (the HTTP API)."""
        return self.due_ms is None and not self.envelope.ends_burst


class InputBuilder:
    """``client.inputs``: one method per input kind, with the arguments of the client's method that sends it (see
    :class:`~worker.client.ConversationClient` for what each means), answering the :class:`CheckedInput` that method
    accepts; :meth:`build` picks the method by kind (a producer's body names it). Raises
    :class:`~worker.errors.InputError` for a bad input, as the client does."""

    def __init__(self, client: ConversationClient) -> None:
        self._client = client

    def build(self, kind: str, conversation_id: str, arguments: Mapping[str, Any]) -> CheckedInput:
        """The input of ``kind`` that ``arguments`` (the keywords of its client method) make."""
        builders: dict[str, Callable[..., CheckedInput]] = {
            InputKind.MESSAGE: self.message, InputKind.EVENT: self.event, InputKind.RESET: self.reset,
            InputKind.NOTICE: self.notice, InputKind.OPERATOR: self.operator}
        builder = builders.get(kind)
        if builder is None:
            raise EnvelopeError(f"no producer sends a {kind}")
        return builder(conversation_id, **arguments)

    def message(self, conversation_id: str, text: str, *, message_id: str | None = None, reply_to: str | None = None,
                system: str | None = None, recipient: str | None = None, media: Media | None = None,
                at: datetime | None = None, sent_at: int | None = None) -> CheckedInput:
        """``sent_at``: when the player sent it, as the channel says (seconds since the epoch; the webhook ingress
        passes WhatsApp's ``timestamp``), kept as the message's time in the state."""
        return self.check(_envelope(kind=InputKind.MESSAGE, conversation_id=conversation_id, text=text or None,
                                    message_id=message_id, reply_to=reply_to, system=system, recipient=recipient,
                                    media=media, sent_at=sent_at), at=at)

    def notice(self, conversation_id: str, text: str, *, message_id: str | None = None, reply_to: str | None = None,
               recipient: str | None = None) -> CheckedInput:
        return self.check(_envelope(kind=InputKind.NOTICE, conversation_id=conversation_id, text=text,
                                    message_id=message_id, reply_to=reply_to, recipient=recipient))

    def event(self, conversation_id: str, text: str, *, message_id: str | None = None, pinned: bool = False,
              from_player: bool = False, key: str | None = None, respond: bool = False, at: datetime | None = None,
              recipient: str | None = None, sent_at: int | None = None) -> CheckedInput:
        """``sent_at``: as for :meth:`message`, for an event the player sent (``from_player``)."""
        return self.check(_envelope(kind=InputKind.EVENT, conversation_id=conversation_id, text=text,
                                    message_id=message_id, pinned=pinned, from_player=from_player or None, key=key,
                                    respond=respond or None, recipient=recipient, sent_at=sent_at), at=at)

    def reset(self, conversation_id: str, *, message_id: str | None = None,
              at: datetime | None = None, forget: bool = False) -> CheckedInput:
        return self.check(_envelope(kind=InputKind.RESET, conversation_id=conversation_id, message_id=message_id,
                                    forget=True if forget else None), at=at)

    def operator(self, conversation_id: str, text: str, *, message_id: str | None = None,
                 parts: Sequence[dict[str, Any]] | None = None, recipient: str | None = None) -> CheckedInput:
        texts = operator_input.operator_parts(parts, self._client.max_text_chars)
        return self.check(_envelope(kind=InputKind.OPERATOR, conversation_id=conversation_id, text=text,
                                    message_id=message_id, parts=texts, recipient=recipient))

    def check(self, env: Envelope, *, at: datetime | None = None) -> CheckedInput:
        """Refuse what the envelope's own checks do not (the input limit, the system prompt's, the encoded envelope's,
        an ``at`` too far ahead)."""
        limit = self._client.max_text_chars
        if env.text is not None and env.kind.within_input_limit and len(env.text) > limit:
            raise OversizeInputError(f"text is {len(env.text)} characters; the limit is {limit}", field="text")
        if env.system is not None and len(env.system) > MAX_SYSTEM_CHARS:
            raise OversizeInputError(f"system is {len(env.system)} characters; the limit is {MAX_SYSTEM_CHARS}",
                                     field="system")
        _check_encoded_size(env)
        due = due_ms(at) if at is not None else None
        if due is not None:
            # Held, it is accepted into the mailbox when due: that is its accept time (a reply's wait is timed from it).
            env = env.model_copy(update={"accepted_at": due / 1000})
        return CheckedInput(env, env.opens_window, due)


#: What an encoded envelope holds besides its free texts (ids, media, fact key, the traceparent its accept adds, numbers,
#: msgpack's framing), at four UTF-8 bytes a character: a generous bound on all of them together.
_BOUNDED_FIELDS_BYTES = 64 << 10


def _check_encoded_size(env: Envelope) -> None:
    """Refuse an input whose envelope, encoded with the traceparent its accept may add, is over
    ``MAX_ENVELOPE_BYTES``: stored, it could never be decoded (dead-lettered at best, held a year as a timer at worst).
    A bound on the size (every character at most four UTF-8 bytes) settles nearly every input without encoding it
    twice; only a long one, or one with parts, is encoded here."""
    free_chars = len(env.text or "") + len(env.system or "")
    if env.parts is None and env.state is None and 4 * free_chars + _BOUNDED_FIELDS_BYTES <= MAX_ENVELOPE_BYTES:
        return
    size = len(env.to_bytes()) + MAX_TRACEPARENT_CHARS + 16  # the traceparent, its key and framing
    if size > MAX_ENVELOPE_BYTES:
        raise EnvelopeTooLargeError(f"the input is {size} bytes encoded; an input's envelope is at most "
                                    f"{MAX_ENVELOPE_BYTES} bytes")


def _envelope(**fields: Any) -> Envelope:
    validate_conversation_id(fields["conversation_id"])
    return build_envelope(**{k: v for k, v in fields.items() if v is not None})
