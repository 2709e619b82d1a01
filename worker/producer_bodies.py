"""The producers' API bodies: what a game engine in any language sends, over HTTP (``/v1/``) or as a queue message
(``parley inlet``). Pydantic models, no web framework: the HTTP API, its OpenAPI document and the inlet share them.

Each body's fields are the keyword arguments of the :class:`~worker.client.ConversationClient` method of the same
name (:meth:`ProducerBody.arguments`), so a field the game-driven turns add (``at``, ``key``, ``respond``; the handoff
operations ``pause``, ``resume``, ``operator-messages``) is added here, in the model, and in the client: nowhere
else. Until the client honours a field, the body refuses it (``extra="forbid"``: an unknown field is a 422 naming it),
so a producer never believes Parley scheduled or answered something it silently ignored.

Only the shape is checked here (types, required fields, lengths that never change). What the client checks (the
conversation id, the text limit ``PARLEY_MAX_INPUT_CHARS``, lone surrogates, blank text) stays in the client, and its
:class:`~worker.errors.InputError` is answered as a 422 too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from worker.due_time import RFC3339, parse_rfc3339
from worker.envelopes import FACT_KEY_PATTERN, MAX_FACT_KEY_CHARS, MAX_ID_CHARS

#: A message id: the producer's own id of the input (a game event's id, a wamid); resubmitting it is harmless.
MessageId = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS, pattern="^[^\n\x00]*$", description=(
    "The producer's id of this input: resubmitting it (a retry after a timeout, a 429 or a 503) is harmless, "
    "it is answered as a duplicate. No newline or NUL. Default: a fresh id (a retry is then a second input)."))]
Text = Annotated[str, Field(min_length=1, pattern=r"\S", description=(
    "The text: not blank, at most PARLEY_MAX_INPUT_CHARS characters (a longer one is a 422 naming `text`)."))]
#: When the input becomes due (``ConversationClient``'s ``at=``): held until then, at once when now or past.
At = Annotated[datetime, BeforeValidator(parse_rfc3339), WithJsonSchema({
    "type": "string", "format": "date-time", "pattern": RFC3339, "description": (
        "Hold the input until this time (RFC 3339 with an offset, e.g. 2026-11-25T19:30:00Z), then it joins the "
        "conversation's order; now or past: at once. Cancel one not yet due with DELETE .../scheduled/{message_id} "
        "(give a message_id to do so).")})]


class ProducerBody(BaseModel):
    """A body of the producers' API: strict JSON types, no field the engine cannot honour."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    def arguments(self) -> dict[str, Any]:
        """The client method's keyword arguments (the fields left out stay at the client's defaults)."""
        return self.model_dump(exclude_unset=True)


class MessageBody(ProducerBody):
    """``POST /v1/conversations/{conversation_id}/messages``: a chat turn (``ConversationClient.send_message``)."""

    text: Text
    message_id: MessageId | None = None
    reply_to: str | None = Field(None, min_length=1, max_length=MAX_ID_CHARS,
                                 description="The channel's id of the message the reply answers (WhatsApp threads it).")
    recipient: str | None = Field(None, min_length=1, max_length=MAX_ID_CHARS,
                                  description="Where the reply goes. Default: the conversation id.")
    system: str | None = Field(None, description="Replaces the configured system prompt for this turn.")
    at: At | None = None


class EventBody(ProducerBody):
    """``POST /v1/conversations/{conversation_id}/events``: a game event (``ConversationClient.send_event``): no
    model call and no reply, the model reads it on the next turn; with ``respond`` the model answers it now."""

    text: Text
    message_id: MessageId | None = None
    pinned: bool = Field(False, description="A fact the conversation keeps through compaction.")
    key: str | None = Field(None, min_length=1, max_length=MAX_FACT_KEY_CHARS, pattern=FACT_KEY_PATTERN,
                            description="The text is the conversation's fact of this key (e.g. `target`): it "
                                        "replaces the fact sent before with the same key and survives every "
                                        "compaction.")
    respond: bool = Field(False, description="The model answers the event itself (no player message); the answer "
                                             "is sent like a reply (outside WhatsApp's 24-hour window: the "
                                             "configured template).")
    at: At | None = None


class ResetBody(ProducerBody):
    """``POST /v1/conversations/{conversation_id}/reset`` (``ConversationClient.reset``): the inputs before it are
    applied first, then the conversation starts fresh. The body may be empty."""

    message_id: MessageId | None = None
    at: At | None = None


class Accepted(BaseModel):
    """202: the input is in the conversation's mailbox (or was already: ``duplicate``)."""

    input_id: str = Field(description="The input's message id (the one given, or the one Parley chose).")
    duplicate: bool = Field(description="The message id was accepted before; nothing new was queued.")


class Cancelled(BaseModel):
    """``DELETE .../scheduled/{message_id}``: 200 when an input held with ``at`` was cancelled before it was due."""

    message_id: str
    cancelled: bool = Field(description="Always true in a 200 (404 when none with this id is held).")


class Problem(BaseModel):
    """Every error answer: what is wrong in one sentence and, for a 400/422, the field it is about."""

    error: str
    field: str | None = Field(None, description="The field at fault (`conversation_id` for the path), when one is.")


#: The kinds a queue message may carry, and the body of each (the inlet reads ``{"kind", "conversation_id", ...}``).
KINDS: dict[str, type[ProducerBody]] = {"message": MessageBody, "event": EventBody, "reset": ResetBody}
Kind = Literal["message", "event", "reset"]

#: The ConversationClient method each kind calls.
CLIENT_METHODS: dict[str, str] = {"message": "send_message", "event": "send_event", "reset": "reset"}

def field_of(loc: tuple[int | str, ...]) -> str | None:
    """The dotted field name of a pydantic error location (``None`` for the body as a whole)."""
    return ".".join(str(p) for p in loc) or None


class Summary(BaseModel):
    """``GET /v1/conversations/{conversation_id}``: what ``parley show`` prints."""

    model_config = ConfigDict(extra="allow")

    conversation_id: str
    version: int = Field(description="The state's version: how many times a worker committed it.")
    mailbox_depth: int = Field(description="Inputs waiting.")
    outbox_depth: int = Field(description="Replies waiting to be sent.")
    dead_letters: int
    quarantined_states: int
    tokens_today: int
    last_replies: list[dict[str, Any]]
    delivered: list[dict[str, Any]]
    statuses: list[dict[str, Any]]
    state: dict[str, Any] = Field(description="The decoded state (messages, summary, pinned facts).")


Scope = Literal["producer", "operator"]
"""What a token may do: a producer queues inputs and reads summaries; an operator may also delete."""


@dataclass(frozen=True)
class Operation:
    """One operation of the API: the route, the scope it needs, its body and what it does. The OpenAPI document is
    generated from these (:mod:`worker.ingress.openapi`)."""

    operation_id: str
    method: str
    path: str
    scope: Scope
    summary: str
    kind: str | None = None  # an input of this kind (its body is KINDS[kind]); None: delete or read

    @property
    def body(self) -> type[ProducerBody] | None:
        return KINDS[self.kind] if self.kind else None


_CONVERSATION = "/v1/conversations/{conversation_id}"
OPERATIONS: tuple[Operation, ...] = (
    Operation("send_message", "POST", _CONVERSATION + "/messages", "producer",
              "Queue a chat turn; the model answers it.", "message"),
    Operation("send_event", "POST", _CONVERSATION + "/events", "producer",
              "Queue a game event; no model call, the model reads it on the next turn.", "event"),
    Operation("reset", "POST", _CONVERSATION + "/reset", "producer",
              "Queue a reset: the inputs before it are applied first, then the conversation starts fresh.", "reset"),
    Operation("delete", "DELETE", _CONVERSATION, "operator",
              "Delete everything of the conversation now (its message ids are remembered for a while)."),
    Operation("summary", "GET", _CONVERSATION, "producer",
              "What `parley show` prints: state, mailbox and outbox depth, last replies, delivery statuses."),
    Operation("cancel_scheduled", "DELETE", _CONVERSATION + "/scheduled/{message_id}", "producer",
              "Cancel an input sent with `at` that is not yet due (404 when none with this message id is held)."),
)
