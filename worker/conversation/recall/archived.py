"""One archived message: what left a conversation's verbatim history, kept so the model can search it later."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, get_args

from worker.errors import InvalidMessageError

Speaker = Literal["player", "assistant", "operator", "game", "tool"]
SPEAKERS: tuple[Speaker, ...] = get_args(Speaker)


@dataclass(frozen=True, slots=True)
class ArchivedMessage:
    """A message as the archive keeps it.

    ``id`` is what makes an archive write idempotent: the same message archived again (a retried commit, a replayed
    compaction) carries the same id and is skipped. It must not depend on the state's epoch, which a fresh state
    resets; :func:`stable_id` derives one from what a message is. ``at`` is an aware time, or None for messages
    stored before messages had a time."""

    id: str
    speaker: Speaker
    text: str
    at: datetime | None = None

    def __post_init__(self) -> None:
        if self.speaker not in SPEAKERS:
            raise InvalidMessageError(f"unknown speaker {self.speaker!r}; expected one of {', '.join(SPEAKERS)}")
        if not self.id:
            raise InvalidMessageError("an archived message needs an id")
        if self.at is not None and self.at.utcoffset() is None:
            raise InvalidMessageError("an archived message's time must be aware (carry its UTC offset)")


def stable_id(conversation_id: str, ordinal: int, speaker: Speaker, text: str) -> str:
    """An id for the ``ordinal``-th message of a conversation (its position since the conversation began, which
    outlives epochs), bound to what it says: two writers that archive the same message compute the same id, and a
    different message at a reused position (a conversation deleted and begun again) gets another one."""
    digest = hashlib.blake2b(digest_size=10)
    for part in (conversation_id, str(ordinal), speaker, text):
        encoded = part.encode("utf-8", "surrogatepass")
        digest.update(len(encoded).to_bytes(4, "big"))
        digest.update(encoded)
    return f"{ordinal}:{digest.hexdigest()}"
