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
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from worker.envelopes.due_time import RFC3339, parse_rfc3339
from worker.envelopes.inputs import FACT_KEY_PATTERN, MAX_FACT_KEY_CHARS, MAX_ID_CHARS, MAX_SYSTEM_CHARS, InputKind
from worker.envelopes.operator_input import MAX_PARTS, MAX_PAUSE_SECONDS
from worker.envelopes.reply_parts import MAX_BUTTONS, MAX_LIST_ROWS, MAX_SECTIONS, PART_TYPES, Part

#: A message id: the producer's own id of the input (a game event's id, a wamid); resubmitting it is harmless.
MessageId = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS, pattern="^[^\n\x00]*$", description=(
    "The producer's id of this input: resubmitting it (a retry after a timeout, a 429 or a 503) is harmless, "
    "it is answered as a duplicate. No newline or NUL. Default: a fresh id (a retry is then a second input)."))]
#: Not blank: a character Python's ``str.strip`` keeps (what the envelope checks). ``\S`` alone would let through the
#: information separators U+001C-U+001F, which regex engines do not count as white space and ``strip`` does.
NOT_BLANK = r"[^\s\x1c-\x1f]"
Text = Annotated[str, Field(min_length=1, pattern=NOT_BLANK, description=(
    "The text: not blank, at most PARLEY_MAX_INPUT_CHARS characters (a longer one is a 422 naming `text`)."))]
#: When the input becomes due (``ConversationClient``'s ``at=``): held until then, at once when now or past.
At = Annotated[datetime, BeforeValidator(parse_rfc3339), WithJsonSchema({
    "type": "string", "format": "date-time", "pattern": RFC3339, "description": (
        "Hold the input until this time (RFC 3339 with an offset, e.g. 2026-11-25T19:30:00Z), then it joins the "
        "conversation's order; now or past: at once; at most 366 days ahead. Cancel one not yet due with DELETE .../scheduled/{message_id} "
        "(give a message_id to do so).")})]
#: The most JSON objects one valid reply part holds: a list (itself, its sections, its rows: at most MAX_LIST_ROWS in
#: all) or a buttons part (itself and its buttons); every other part is one object.
MAX_PART_OBJECTS = max(1 + MAX_SECTIONS + MAX_LIST_ROWS, 1 + MAX_BUTTONS)


class ProducerBody(BaseModel):
    """A body of the producers' API: strict JSON types, no field the engine cannot honour."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    #: The most JSON objects a valid body holds: the decoder refuses a body past it (413) before it is walked. A body
    #: is one flat object unless it says otherwise.
    max_objects: ClassVar[int] = 1

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
    system: str | None = Field(None, max_length=MAX_SYSTEM_CHARS,
                               description="Replaces the configured system prompt for this turn.")
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
    recipient: str | None = Field(None, min_length=1, max_length=MAX_ID_CHARS,
                                  description="Where the answer goes (with `respond`). Default: the conversation id.")


class ResetBody(ProducerBody):
    """``POST /v1/conversations/{conversation_id}/reset`` (``ConversationClient.reset``): the inputs before it are
    applied first, then the conversation starts fresh. The body may be empty."""

    message_id: MessageId | None = None
    at: At | None = None
    forget: bool = Field(False, description="Erase the conversation's archive too (what the model can still search "
                                            "of it). Without it the history is kept in the archive.")


class OperatorMessageBody(ProducerBody):
    """``POST /v1/conversations/{conversation_id}/operator-messages`` (``ConversationClient.send_operator_message``):
    a person's message to the player, sent in order with the replies and kept in the state as a person's."""

    text: Text
    message_id: MessageId | None = None
    parts: list[Part] | None = Field(None, max_length=MAX_PARTS, description=(
        "More messages after `text`, in order: `{\"type\": \"text\", \"text\": ...}` or a rich part (image, "
        "location, location_request, buttons, list, reaction), each checked against WhatsApp's limits."))
    recipient: str | None = Field(None, min_length=1, max_length=MAX_ID_CHARS,
                                  description="Where it goes. Default: the conversation id.")

    max_objects: ClassVar[int] = 1 + MAX_PARTS * MAX_PART_OBJECTS


class PauseBody(ProducerBody):
    """``POST /v1/conversations/{conversation_id}/pause`` (``ConversationClient.pause``): a person takes the
    conversation over, at once. The body may be empty (paused until resumed)."""

    seconds: float | None = Field(None, gt=0, le=MAX_PAUSE_SECONDS,
                                  description="End the pause by itself after this many seconds (at most a week). "
                                              "Default: until resumed.")


class ResumeBody(ProducerBody):
    """``POST /v1/conversations/{conversation_id}/resume`` (``ConversationClient.resume``): the model answers
    again. The body may be empty."""


class PauseState(BaseModel):
    """200: the conversation's pause after a pause or a resume."""

    conversation_id: str
    paused: bool
    until: float | None = Field(description="When the pause ends by itself (seconds since the epoch); null: "
                                            "until resumed, or not paused.")
    was_paused: bool | None = Field(None, description="For a resume: whether it was paused.")


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
KINDS: dict[str, type[ProducerBody]] = {InputKind.MESSAGE: MessageBody, InputKind.EVENT: EventBody,
                                        InputKind.RESET: ResetBody}

#: The handoff operations' bodies (HTTP only, operator scope; not queue messages): an operator's message is an input
#: (202), a pause or a resume answers the pause in force (200, :class:`PauseState`).
HANDOFF: dict[str, type[ProducerBody]] = {InputKind.OPERATOR: OperatorMessageBody, "pause": PauseBody,
                                          "resume": ResumeBody}
PAUSE_KINDS = frozenset({"pause", "resume"})  # each the name of the ConversationClient method it calls


def field_of(loc: tuple[int | str, ...]) -> str | None:
    """The dotted field name of a pydantic error location (``None`` for the body as a whole). A reply part's type tag,
    which pydantic puts in the location after the part's index, is left out: ``parts.0.buttons.0.title``."""
    kept = [p for i, p in enumerate(loc) if not (i and isinstance(loc[i - 1], int) and p in PART_TYPES)]
    return ".".join(str(p) for p in kept) or None


class Summary(BaseModel):
    """``GET /v1/conversations/{conversation_id}``: what ``parley show`` prints."""

    model_config = ConfigDict(extra="allow")

    conversation_id: str
    version: int = Field(description="The state's version: how many times a worker committed it.")
    mailbox_depth: int = Field(description="Inputs waiting.")
    scheduled: int = Field(0, description="Inputs held until their `at` (cancel one with DELETE "
                                          ".../scheduled/{message_id}).")
    outbox_depth: int = Field(description="Replies waiting to be sent.")
    dead_letters: int
    quarantined_states: int
    tokens_today: int
    last_replies: list[dict[str, Any]]
    delivered: list[dict[str, Any]]
    statuses: list[dict[str, Any]]
    state: dict[str, Any] = Field(description="The decoded state (messages, summary, pinned facts).")
    paused: bool = Field(False, description="A person has taken the conversation over (no model call, no reply).")
    paused_until: float | None = Field(None, description="When the pause ends by itself (seconds since the epoch); "
                                                         "null: until resumed.")
    opted_out: bool = Field(False, description="The player opted out (an opt-out phrase such as STOP, or `parley "
                                               "optout`): nothing business-initiated is sent to them. Outlives a "
                                               "delete.")
    marketing_opted_out: bool = Field(False, description="The player stopped marketing messages (Meta's "
                                                         "user_preferences webhook): no template goes to them.")


Scope = Literal["producer", "operator"]
"""What a token may do: a producer queues inputs and reads summaries; an operator may also delete, pause, resume and
send a person's messages."""


@dataclass(frozen=True)
class Operation:
    """One operation of the API: the route, the scope it needs, its body and what it does. The OpenAPI document is
    generated from these (:mod:`worker.ingress.openapi`)."""

    operation_id: str
    method: str
    path: str
    scope: Scope
    summary: str
    kind: str | None = None  # an input of this kind (its body is KINDS[kind]) or a handoff operation (HANDOFF)

    @property
    def body(self) -> type[ProducerBody] | None:
        return (KINDS.get(self.kind) or HANDOFF[self.kind]) if self.kind else None


_CONVERSATION = "/v1/conversations/{conversation_id}"
OPERATIONS: tuple[Operation, ...] = (
    Operation("send_message", "POST", _CONVERSATION + "/messages", "producer",
              "Queue a chat turn; the model answers it.", "message"),
    Operation("send_event", "POST", _CONVERSATION + "/events", "producer",
              "Queue a game event: applied with no reply, the model reads it on the next turn; with `respond` the "
              "model answers it now, with `key` it replaces the fact of that key, with `at` it is held until then.",
              "event"),
    Operation("reset", "POST", _CONVERSATION + "/reset", "producer",
              "Queue a reset: the inputs before it are applied first, then the conversation starts fresh.", "reset"),
    Operation("delete", "DELETE", _CONVERSATION, "operator",
              "Delete everything of the conversation now (its message ids are remembered for a while)."),
    Operation("summary", "GET", _CONVERSATION, "producer",
              "What `parley show` prints: state, mailbox and outbox depth, last replies, delivery statuses."),
    Operation("cancel_scheduled", "DELETE", _CONVERSATION + "/scheduled/{message_id}", "producer",
              "Cancel an input sent with `at` that is not yet due (404 when none with this message id is held)."),
    Operation("pause", "POST", _CONVERSATION + "/pause", "operator",
              "A person takes the conversation over, at once: no model call and no reply until resumed (or for "
              "`seconds`); the player's messages still enter the state.", "pause"),
    Operation("resume", "POST", _CONVERSATION + "/resume", "operator",
              "Hand the conversation back to the model, at once.", "resume"),
    Operation("send_operator_message", "POST", _CONVERSATION + "/operator-messages", "operator",
              "Queue a person's message to the player: sent in order with the replies, kept in the state as a "
              "person's.", "operator"),
)
