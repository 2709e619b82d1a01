"""Conversation ids: what may name a conversation, checked before an id becomes part of a Redis key, a log line or a
URL (one conversation can never reach another's keys)."""

from __future__ import annotations

import re

from worker.errors import InvalidConversationIdError

MAX_ID_LENGTH = 128
#: What a conversation id (and a key part that cannot escape its key) may be.
ID_PATTERN = re.compile(r"[A-Za-z0-9._@+=-]{1,128}")


def validate_conversation_id(cid: object) -> str:
    """Return ``cid`` when it is safe as part of a key; raise :class:`InvalidConversationIdError` otherwise.

    Allowed: 1 to 128 of ``A-Z a-z 0-9 . _ @ + = -`` — phone numbers, WhatsApp business-scoped ids
    (``US.13491208655302741918``), game ids. Refused: everything else, notably ``* ? [ ] { } :``, white space,
    newlines and non-ASCII letters.
    """
    if not isinstance(cid, str):
        raise InvalidConversationIdError(f"conversation id must be a string, got {type(cid).__name__}")
    if not cid:
        raise InvalidConversationIdError("conversation id must not be empty")
    if len(cid) > MAX_ID_LENGTH:
        raise InvalidConversationIdError(f"conversation id is {len(cid)} characters; the limit is {MAX_ID_LENGTH}")
    if not ID_PATTERN.fullmatch(cid):
        bad = sorted({c for c in cid if not ID_PATTERN.fullmatch(c)})[:5]
        raise InvalidConversationIdError(
            f"conversation id may only contain letters, digits and . _ @ + = - (found {''.join(bad)!r})")
    return cid
