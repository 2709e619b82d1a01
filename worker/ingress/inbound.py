"""What the webhook ingress reads a WhatsApp webhook into: one record per message or status (pure data; the
parsing is :mod:`worker.ingress.parse`, which re-exports these)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from worker.envelopes.inputs import Media
from worker.ingress.taps import TAP_TYPES

LocationAs = Literal["event", "turn"]


class InboundMessage(BaseModel):
    """A user's message that becomes a chat turn (text, template quick-reply button, interactive reply, an image
    with its caption, a location when locations are turns)."""

    wamid: str
    conversation_id: str
    sender: str = Field(description="Where the reply goes: the phone number, else the BSUID (== conversation_id).")
    type: str
    text: str = Field(description="What the player wrote; an image's caption, empty when it has none.")
    reply_to: str | None = Field(None, description="The wamid of our message the user replied to (context.id).")
    timestamp: str | None = None
    user_id: str | None = Field(None, description="The sender's BSUID when the webhook carries one.")
    phone: str | None = Field(None, description="The sender's phone number when the webhook carries one.")
    media: Media | None = Field(None, description="The picture the player sent (by Cloud API media id).")

    @property
    def thread(self) -> str:
        """The message the answer quotes: for a tap, the message whose button or row was tapped (so the answer
        sits under the question it settles), else the player's own message."""
        return self.reply_to if self.type in TAP_TYPES and self.reply_to else self.wamid


class InboundEvent(BaseModel):
    """A user's message that becomes a game event: no model call and no reply, the model reads ``text`` as
    context on the next turn (a shared location, a reaction to one of our replies)."""

    wamid: str
    conversation_id: str
    type: str
    text: str
    timestamp: str | None = None
    user_id: str | None = None
    phone: str | None = None


class InboundNotice(BaseModel):
    """A user's message Parley cannot read (a voice note, video, document, sticker, contact card, ``unsupported``
    or unknown type): the player gets the configured short answer, in order with the other replies."""

    wamid: str
    conversation_id: str
    sender: str = Field(description="Where the short answer goes (as for a turn).")
    type: str = Field(description="What it was, for logs: the message type, ``audio:voice`` for a voice note, "
                                  "``unsupported:<what>`` when Meta names it.")
    reason: str = ""
    timestamp: str | None = None
    user_id: str | None = None
    phone: str | None = None


class StatusUpdate(BaseModel):
    """A delivery status of a message we sent: sent, delivered, read, failed, ...

    When the status carries the callback data Parley sent the message with (``biz_opaque_callback_data``, see
    :func:`worker.envelopes.inputs.part_callback`), ``reply_id`` and ``part`` name the reply part it was, and
    ``conversation_id`` is the conversation that reply belongs to (its recipient may be another id)."""

    wamid: str
    status: str
    conversation_id: str
    reply_id: str | None = None
    part: int = 0
    traceparent: str | None = None  # the send's, from the callback data: the status continues the reply's trace
    timestamp: str | None = None
    errors: list[tuple[int | None, str]] = Field(default_factory=list,
                                                 description="(code, message or title + details) per error.")
    user_id: str | None = Field(None, description="The recipient's BSUID when the webhook carries one.")
    phone: str | None = Field(None, description="The recipient's phone number when the webhook carries one.")

    def detail(self) -> str:
        """The errors as one line for the store (``"131047: Re-engagement message ...; ..."``)."""
        return "; ".join(f"{code}: {text}" if code is not None else text for code, text in self.errors)


class Unsupported(BaseModel):
    """Something we do not turn into a turn or a status, with the reason (for the log and the summary)."""

    kind: str
    wamid: str | None = None
    reason: str = ""


class IdentityChange(BaseModel):
    """Meta's system message that a player's phone number (``user_changed_number``, formerly
    ``customer_changed_number``) or business-scoped user id (``user_changed_user_id``) changed: ``new`` now names the
    player ``old`` named (``field``: ``phone`` or ``user_id``)."""

    wamid: str
    field: Literal["phone", "user_id"]
    old: str
    new: str
    timestamp: str | None = None


class MarketingPreference(BaseModel):
    """Meta's ``user_preferences`` webhook: the player stopped (``stop`` True) or resumed marketing messages."""

    phone: str | None = None
    user_id: str | None = None
    stop: bool
    category: str = "marketing_messages"
    timestamp: str | None = None

    @property
    def conversation_id(self) -> str:
        return self.phone or self.user_id or ""


Record = (InboundMessage | InboundEvent | InboundNotice | StatusUpdate | IdentityChange | MarketingPreference
          | Unsupported)
