"""When each message was said (:attr:`~worker.conversation.messages.Message.at`): how a time is kept (whole seconds
since the epoch, UTC) and how the messages a write adds get theirs.

A player's message comes with the channel's time (WhatsApp's ``timestamp``); any other message, and a player's that
came without one, takes the time of the write that stores it: the turn's (or the event's) time, read once from the
chat's injected clock (the pure core reads no clock of its own), given by
:meth:`~worker.conversation.state_model.ConversationState.append` to each message it adds without a time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

from worker.conversation.messages import Message

#: The seconds a stored time may hold: the years 1 to 9999, what a datetime can be.
MIN_SECONDS, MAX_SECONDS = -62_135_596_800, 253_402_300_799


def to_seconds(at: datetime) -> int:
    """``at`` as whole seconds since the epoch (what the state keeps: a time is kept to the second)."""
    return math.floor(at.timestamp())


def from_seconds(seconds: int) -> datetime:
    """Whole seconds since the epoch as an aware UTC datetime."""
    return datetime.fromtimestamp(seconds, UTC)


def untimed(messages: Sequence[Message]) -> list[Message]:
    """``messages`` without times, for a state written in a format without them: the state kept in memory is then the
    one a read of the stored blob gives."""
    return [m if m.at is None else replace(m, at=None) for m in messages]
