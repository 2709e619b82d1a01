"""A player's message as the state keeps it: with the time the channel says it was sent (the envelope's ``sent_at``,
WhatsApp's ``timestamp``). Without one, the message takes the time of the write that stores it (the chat's)."""

from __future__ import annotations

from dataclasses import replace

from worker.conversation.message_times import from_seconds
from worker.conversation.messages import Message
from worker.envelopes.inputs import Envelope


def as_sent(message: Message, env: Envelope) -> Message:
    """``message`` (what ``env`` becomes in the state) with the time ``env`` was sent, when it says."""
    return message if env.sent_at is None else replace(message, at=from_seconds(env.sent_at))
