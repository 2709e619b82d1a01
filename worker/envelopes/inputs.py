"""What travels through the mailbox and the outbox: pydantic models, msgpack on the wire.

An :class:`Envelope` is one accepted input of a conversation (a chat turn, a game event, a reset, or
an internal compaction result to splice in). A :class:`ReplyRecord` is one reply waiting in the outbox,
already split into the parts that will be sent. A :class:`DeadLetter` is an input or a reply that could
not be applied or delivered, with the reason in words.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

import msgpack
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from worker.envelopes.addresses import validate_conversation_id
from worker.envelopes.reply_parts import STORED, OutPart
from worker.envelopes.trace_context import MAX_TRACEPARENT_CHARS, valid_traceparent
from worker.errors import EnvelopeError, InputError, InvalidConversationIdError, InvalidTextError

ENVELOPE_VERSION = 1
MAX_ENVELOPE_BYTES = 4 << 20
MAX_ID_CHARS = 256
#: A turn's own system prompt (``system``): a few times the default input limit, so one input cannot carry megabytes
#: the model is asked to read on every retry (and the envelope stays far within MAX_ENVELOPE_BYTES).
MAX_SYSTEM_CHARS = 64_000
#: The latest time an input's ``sent_at`` may name (the end of the year 9999, in seconds since the epoch).
MAX_SENT_AT = 253_402_300_799

class InputKind(StrEnum):
    """What an input is. The value is what travels (a mailbox entry, a timer, the inlet's JSON, the HTTP API), so an
    input stored before reads the same; a new kind is a member here and its rules below, then a client method that
    builds it (worker/client/) and the drain's decision for it (worker/service/drain/decide.py)."""

    MESSAGE = "message"  # a chat turn the player sent: the model answers it
    EVENT = "event"  # a game event: context for the next turn, a fact (key), or answered itself (respond)
    RESET = "reset"  # the conversation starts fresh after the inputs before it
    SPLICE = "splice"  # a compaction's result, applied in order (internal: no producer sends one)
    NOTICE = "notice"  # a fixed short answer, sent in order without a model call
    OPERATOR = "operator"  # a person's message to the player

    @property
    def burstable(self) -> bool:
        """Whether an input of this kind may join a player's burst (worker.service.drain.burst); any other ends one."""
        return self in BURSTABLE

    @property
    def needs_text(self) -> bool:
        """Whether an input of this kind carries words (a message with a picture may have an empty caption)."""
        return self in _WITH_TEXT

    @property
    def within_input_limit(self) -> bool:
        """Whether its text is held to the producer's input limit: a notice's is the deployment's own short answer,
        not the player's words."""
        return self is not InputKind.NOTICE


#: The kinds that may join a player's burst (worker.service.drain.burst); any other ends one, and its accept ends a
#: burst's quiet period being waited out (worker.client).
BURSTABLE: frozenset[InputKind] = frozenset({InputKind.MESSAGE, InputKind.EVENT})
_WITH_TEXT = frozenset({InputKind.MESSAGE, InputKind.EVENT, InputKind.NOTICE, InputKind.OPERATOR})


def _new_id() -> str:
    return uuid.uuid4().hex


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def to_bytes(self) -> bytes:
        return msgpack.packb(self.model_dump(mode="python", exclude_none=True), use_bin_type=True)


class Media(_Wire):
    """A picture the player sent: the Cloud API media id (the bytes are fetched when the turn runs, never kept
    in the mailbox or the state), its MIME type and SHA-256 as the webhook gave them."""

    kind: Literal["image"] = "image"
    id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    mime_type: str | None = Field(None, max_length=200)
    sha256: str | None = Field(None, max_length=200)


class Spent(_Wire):
    """Tokens the model calls behind a splice (the compaction's summariser) used, as the provider reported them:
    counted towards the player's daily budget and the record's usage when the splice is applied in order."""

    prompt: int = Field(0, ge=0)
    completion: int = Field(0, ge=0)
    cached: int = Field(0, ge=0)
    cache_write: int = Field(0, ge=0)
    model: str | None = Field(None, max_length=200)

    @property
    def total(self) -> int:
        return self.prompt + self.completion


#: A fact's key (``send_event(..., key=...)``): not blank, no newline or NUL (the core's check is the same).
MAX_FACT_KEY_CHARS = 128
FACT_KEY_PATTERN = "^[^\n\r\x00]*\\S[^\n\r\x00]*$"


class Envelope(_Wire):
    """One input for a conversation.

    ``message_id`` makes submission idempotent (WhatsApp's ``wamid``, a game engine's event id): a second
    envelope with the same id for the same conversation is ignored. ``system`` overrides the configured
    system prompt for this turn. ``reply_to`` threads the reply to an inbound WhatsApp message;
    ``recipient`` is where the reply goes (default: the conversation id).

    A ``message`` may carry ``media`` (a picture); its ``text`` is then the caption and may be empty. A
    ``notice`` is a fixed short answer (``text``) sent in order with the other replies, without a model call
    and without changing the state: what the player gets for a message Parley cannot read. An ``operator``
    message is a person's words (``text``, then ``parts``) sent in order with the replies, entering the state as
    the assistant's side, marked as a person's (see :mod:`worker.service.drain.handoff`).
    """

    v: int = ENVELOPE_VERSION
    kind: InputKind
    conversation_id: str
    message_id: str = Field(default_factory=_new_id, min_length=1, max_length=MAX_ID_CHARS)
    text: str | None = None
    pinned: bool = False
    system: str | None = None
    reply_to: str | None = Field(None, max_length=MAX_ID_CHARS)
    recipient: str | None = Field(None, max_length=MAX_ID_CHARS)
    accepted_at: float = Field(default_factory=time.time)
    state: bytes | None = None  # splice: the compaction result
    media: Media | None = None
    # An event the player sent (a location pin, a reaction): applied as the player's words, never as the game's
    # (invariant 12). None unless set, so an envelope without it reads as before.
    from_player: bool | None = None
    spent: Spent | None = None  # splice: what computing it cost
    # reset: the conversation's archive is erased too (None: the history is closed into the archive)
    forget: bool | None = None
    # Game-driven turns (events only; None unless set, so an envelope without them reads as before): ``key`` makes
    # the event a fact that replaces the conversation's fact of that key; ``respond`` has the model answer it.
    key: str | None = Field(None, min_length=1, max_length=MAX_FACT_KEY_CHARS)
    respond: bool | None = None
    # operator: the parts sent after ``text``, each as its own message: texts as strings, rich parts tagged
    parts: list[OutPart] | None = None
    # The W3C traceparent of the accept (traces on, worker.observability.tracing): the drain, a retry and a takeover continue its
    # trace. None unless set, so an envelope without it reads as before; an unusable one is no error, only no trace.
    traceparent: str | None = Field(None, max_length=MAX_TRACEPARENT_CHARS)
    # When the player sent it, as the channel says (WhatsApp's ``timestamp``: whole seconds since the epoch), for a
    # message or an event the player sent: the state keeps it as the message's time. None unless set, so an envelope
    # without it reads as before.
    sent_at: int | None = Field(None, ge=0, le=MAX_SENT_AT)

    @field_validator("conversation_id")
    @classmethod
    def _cid(cls, v: str) -> str:
        return validate_conversation_id(v)

    @field_validator("message_id", "text", "system", "reply_to", "recipient")
    @classmethod
    def _utf8(cls, v: str | None, info: ValidationInfo) -> str | None:
        # msgpack and Redis take UTF-8: a lone surrogate would otherwise fail later as a bare UnicodeEncodeError.
        if v is not None:
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as exc:
                err = InvalidTextError(f"{info.field_name} holds a character UTF-8 cannot encode "
                                       f"({v[exc.start]!r}, a lone surrogate) at position {exc.start}")
                err.field = info.field_name
                raise err from None
        return v

    @field_validator("key")
    @classmethod
    def _key(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(FACT_KEY_PATTERN, v):
            raise ValueError("a fact's key must not be blank nor hold newlines or NUL")
        return v

    @field_validator("message_id")
    @classmethod
    def _mid(cls, v: str) -> str:
        if "\n" in v or "\x00" in v:
            raise ValueError("message_id must not contain newlines or NUL")
        return v

    def model_post_init(self, __context: Any) -> None:
        if self.kind is InputKind.MESSAGE and self.media is not None:
            pass  # a picture without a caption
        elif self.kind.needs_text and not (self.text and self.text.strip()):
            what = "an operator message" if self.kind is InputKind.OPERATOR else f"a {self.kind}"
            err = EnvelopeError(f"{what} needs non-empty text")
            err.field = "text"
            raise err
        if self.media is not None and self.kind is not InputKind.MESSAGE:
            raise ValueError("only a message carries media")
        if self.from_player and (self.kind is not InputKind.EVENT or self.pinned):
            raise ValueError("only an event that is not pinned is marked as the player's (pinned items become facts)")
        if (self.key is not None or self.respond) and (self.kind is not InputKind.EVENT or self.from_player):
            raise ValueError("only a game event sets a fact (key) or is answered (respond), never a player's")
        if self.parts is not None and (self.kind is not InputKind.OPERATOR
                                       or not all(p.strip() for p in self.parts if isinstance(p, str))):
            raise ValueError("only an operator's message carries parts, each with text")
        if self.sent_at is not None and not (self.kind is InputKind.MESSAGE or self.from_player):
            raise ValueError("only a player's message or an event the player sent carries the time it was sent")
        if self.kind is InputKind.SPLICE and not self.state:
            raise ValueError("a splice needs the compacted state")

    @property
    def answered_event(self) -> bool:
        """A game event the model answers itself (``respond``)."""
        return self.kind is InputKind.EVENT and bool(self.respond)

    @property
    def ends_burst(self) -> bool:
        """Whether accepting it ends a burst (worker.service.drain.burst) whose quiet period is being waited out:
        anything that cannot join one (a reset, a person's message, a notice) or a game event the model answers. The
        burst is closed by it, so a worker answers the burst at once: waiting out the player's typing would only delay
        the burst's answer and the input behind it (a person writing, a game resetting)."""
        return not self.kind.burstable or self.answered_event

    @property
    def opens_window(self) -> bool:
        """Whether it is a message the player sent, which opens WhatsApp's 24-hour customer-service window: a chat
        turn, or the short answer to a message Parley cannot read (a notice threaded to the player's message, as the
        ingress queues it), or an event the player sent (``from_player``: a location pin, a reaction). The game's own
        events and a producer's own notices are not."""
        return (self.kind is InputKind.MESSAGE or bool(self.from_player)
                or (self.kind is InputKind.NOTICE and self.reply_to is not None))


class ReplyRecord(_Wire):
    """A reply in the outbox, split into the whole messages that will be sent, in order: a text part is a ``str`` (as
    every record before rich replies holds), any other kind a tagged :mod:`worker.envelopes.reply_parts` model.

    Only workers write it and read it, so it ignores fields it does not know: during a rolling upgrade a worker of
    this release delivers what a newer one committed (with fields it has no use for) instead of dead-lettering a
    reply the player is waiting for. Producers' envelopes stay strict (they come from outside)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    v: int = ENVELOPE_VERSION
    reply_id: str
    conversation_id: str
    recipient: str
    parts: list[OutPart]
    reply_to: str | None = None
    created_at: float = Field(default_factory=time.time)
    # When the first input it answers was accepted (None: a reply no input asked for, or written before this field):
    # the delivery times the player's wait from it (parley_reply_latency_seconds).
    accepted_at: float | None = None
    # The trace of the commit that queued it (traces on): each part's send continues it. None unless set.
    traceparent: str | None = Field(None, max_length=MAX_TRACEPARENT_CHARS)


#: WhatsApp keeps at most this many characters of a send's ``biz_opaque_callback_data``.
MAX_CALLBACK_CHARS = 512


@dataclass(frozen=True)
class PartRef:
    """One part of one reply, as named by the callback data it is sent with (see :func:`part_callback`)."""

    conversation_id: str
    reply_id: str
    part: int
    traceparent: str | None = None


def part_callback(conversation_id: str, reply_id: str, part: int, traceparent: str | None = None) -> str | None:
    """``<conversation id>|<reply id>|<part>``: the callback data a reply part is sent with. WhatsApp hands it back,
    unchanged, in the part's status webhooks (``biz_opaque_callback_data``), so the ingress can tell which part a
    status is about, even when the message id of the send never reached Redis (a worker killed between the send and
    its sent mark). ``None`` when it would be longer than WhatsApp keeps: the ids' own limits (128 and 256
    characters) keep it well under, so only a reply id from elsewhere could get there.

    With traces on, ``|<traceparent>`` of the send follows, so the status webhook continues the reply's trace; it is
    left off when it would not fit."""
    data = f"{conversation_id}|{reply_id}|{part}"
    if len(data) > MAX_CALLBACK_CHARS:
        return None
    traced = f"{data}|{traceparent}" if traceparent and valid_traceparent(traceparent) else data
    return traced if len(traced) <= MAX_CALLBACK_CHARS else data


def parse_part_callback(data: object) -> PartRef | None:
    """The reply part :func:`part_callback` named, or ``None`` when ``data`` is not such callback data (absent, or
    set by someone else's sender sharing the WhatsApp number). A conversation id cannot contain ``|``; a reply id
    may, so the part is read from the end."""
    if not isinstance(data, str) or len(data) > MAX_CALLBACK_CHARS:
        return None
    front, bar, last = data.rpartition("|")
    traceparent = valid_traceparent(last) if bar else None
    if traceparent is not None:  # a part number is digits only, never a traceparent
        data = front
    cid, sep, rest = data.partition("|")
    reply_id, sep2, part = rest.rpartition("|")
    if not sep or not sep2 or not reply_id or not part.isdigit() or not part.isascii():
        return None
    try:
        validate_conversation_id(cid)
    except InvalidConversationIdError:
        return None
    return PartRef(cid, reply_id, int(part), traceparent)


class DeadLetter(_Wire):
    """An input or reply set aside with the reason, for ops to read and replay."""

    v: int = ENVELOPE_VERSION
    what: Literal["input", "reply"]
    id: str
    reason: str
    detail: str = ""
    payload: bytes = b""
    attempts: int = 0
    at: float = Field(default_factory=time.time)


def _unpack(data: bytes, what: str) -> dict[str, Any]:
    if not isinstance(data, bytes | bytearray):
        raise EnvelopeError(f"{what} must be bytes")
    if len(data) > MAX_ENVELOPE_BYTES:
        raise EnvelopeError(f"{what} is {len(data)} bytes; the limit is {MAX_ENVELOPE_BYTES}")
    try:
        obj = msgpack.unpackb(bytes(data), raw=False, strict_map_key=True, max_str_len=MAX_ENVELOPE_BYTES,
                              max_bin_len=MAX_ENVELOPE_BYTES, max_array_len=10_000, max_map_len=64)
    except Exception as exc:  # msgpack raises several types for bad data
        raise EnvelopeError(f"{what} is not valid msgpack: {type(exc).__name__}") from None
    if not isinstance(obj, dict):
        raise EnvelopeError(f"{what} must be a msgpack map")
    return obj


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(x) for x in err["loc"]) or "envelope"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def build_envelope(**fields: Any) -> Envelope:
    """An envelope from a producer's arguments, or the :class:`~worker.errors.InputError` that says in one sentence
    what is wrong (an invalid id or text keeps its own type; anything else is an :class:`EnvelopeError`)."""
    try:
        return Envelope(**fields)
    except InputError:
        raise
    except ValidationError as exc:
        for err in exc.errors():
            cause = (err.get("ctx") or {}).get("error")
            if isinstance(cause, InputError):
                raise cause from None
        raise EnvelopeError(f"invalid input: {_describe(exc)}") from None
    except ValueError as exc:
        raise EnvelopeError(str(exc)) from None


def decode_envelope(data: bytes) -> Envelope:
    """Parse an envelope from the wire, or raise :class:`~worker.errors.EnvelopeError` saying what is wrong."""
    obj = _unpack(data, "envelope")
    try:
        return Envelope.model_validate(obj, context=STORED)
    except InvalidConversationIdError as exc:
        raise EnvelopeError(str(exc)) from None
    except ValidationError as exc:
        raise EnvelopeError(f"malformed envelope: {_describe(exc)}") from None


def decode_reply(data: bytes) -> ReplyRecord:
    """Parse an outbox record, or raise :class:`~worker.errors.EnvelopeError`."""
    try:
        return ReplyRecord.model_validate(_unpack(data, "reply record"), context=STORED)
    except ValidationError as exc:
        raise EnvelopeError(f"malformed reply record: {_describe(exc)}") from None


def decode_dead_letter(data: bytes) -> DeadLetter:
    """Parse a dead-letter record, or raise :class:`~worker.errors.EnvelopeError`."""
    try:
        return DeadLetter.model_validate(_unpack(data, "dead letter"))
    except ValidationError as exc:
        raise EnvelopeError(f"malformed dead letter: {_describe(exc)}") from None
