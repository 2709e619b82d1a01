"""What a WhatsApp Cloud API media id may look like (pure: the ingress checks ids with it before they are queued,
the fetcher again before an id becomes part of a URL that carries the access token).

Meta's media ids are digits. Accepted: letters, digits, ``_`` and ``-``, in dot-separated runs (so no empty run:
never ``.`` or ``..``), at most :data:`MAX_MEDIA_ID_CHARS`, matched in full (a trailing newline is not an id).
Nothing that could change the request's path or query: no ``/``, ``?``, ``#``, ``%``, ``:`` or white space.
"""

from __future__ import annotations

import re

MAX_MEDIA_ID_CHARS = 128
_MEDIA_ID = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")


def is_media_id(value: object) -> bool:
    """Whether ``value`` is a string that may be sent to the media endpoint as an id."""
    return (isinstance(value, str) and 0 < len(value) <= MAX_MEDIA_ID_CHARS
            and _MEDIA_ID.fullmatch(value) is not None)
