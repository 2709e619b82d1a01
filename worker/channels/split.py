"""Splitting a reply into whole messages a channel accepts (WhatsApp text: at most 4,096 characters).

Cuts are made at the best boundary that fits: a paragraph break, else a line break, else a sentence end,
else white space, and only as a last resort inside a word — never between a character and a combining mark
or a zero-width joiner that belongs to it. Parts are packed greedily (as few as possible), in order, trimmed,
and never empty.
"""

from __future__ import annotations

import re
import unicodedata

WHATSAPP_TEXT_LIMIT = 4096

_BOUNDARIES = (
    re.compile(r"\n[ \t]*\n\s*"),  # paragraph
    re.compile(r"\n\s*"),  # line
    re.compile(r"(?<=[.!?。！？…])[\"')\]»”’]*\s+"),  # sentence
    re.compile(r"\s+"),  # word
)


def _safe_hard_cut(text: str, limit: int) -> int:
    """A cut position <= limit that does not separate a base character from its combining marks or a ZWJ."""
    cut = limit
    while cut > 1 and (unicodedata.combining(text[cut]) or text[cut] in "\u200d\ufe0f\ufe0e"
                       or text[cut - 1] == "\u200d" or "\udc00" <= text[cut] <= "\udfff"):
        cut -= 1
    return cut if cut > 0 else limit


def _cut(text: str, limit: int) -> tuple[str, str]:
    """The longest head of ``text`` (at most ``limit`` characters) that ends at the best boundary."""
    window = text[: limit + 1]
    for pattern in _BOUNDARIES:
        best = None
        for m in pattern.finditer(window):
            if 0 < m.start() <= limit:
                best = m
        if best is not None:
            return text[: best.start()], text[best.end():]
    cut = _safe_hard_cut(text, limit)
    return text[:cut], text[cut:]


def split_message(text: str, limit: int = WHATSAPP_TEXT_LIMIT) -> list[str]:
    """Split ``text`` into an ordered list of non-empty parts of at most ``limit`` characters each."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    rest = text.strip()
    parts: list[str] = []
    while rest:
        if len(rest) <= limit:
            parts.append(rest)
            break
        head, rest = _cut(rest, limit)
        head, rest = head.rstrip(), rest.lstrip()
        if head:
            parts.append(head)
    return parts or ["…"]
