"""What traces show for a conversation id: a pseudonym by default, since the id is the player's phone number.

A pseudonym is ``p_`` and the first 24 hex digits of HMAC-SHA256(key, conversation id): the same player is the same
pseudonym in every process that has the same key, so a trace backend still groups a player's traces, and no one
without the key can go from a pseudonym back to the number (a phone number has few enough digits that an unkeyed
hash would be reversed by trying them all). ``parley pseudonym ID`` gives an operator the pseudonym of a player.

The key is ``PARLEY_TRACE_ID_KEY`` when set; else the process asks the key source it was given (the fleet's key in
Redis, :func:`worker.store.trace_ids.fleet_trace_key`, which the process's store connection registers) the first
time it needs one. With neither, a random key of this process keeps the ids hidden, though not the same across
processes. ``PARLEY_TRACE_PLAIN_IDS=true`` shows plain ids.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
from collections.abc import Callable, Mapping
from typing import TypeVar

log = logging.getLogger("parley.tracing")

PREFIX = "p_"
_DIGITS = 24

#: The attributes (of spans) and log fields that hold a conversation id.
ID_ATTRIBUTES = frozenset({"gen_ai.conversation.id"})
ID_LOG_FIELDS = frozenset({"conversation_id"})

V = TypeVar("V")


def pseudonym(conversation_id: str, key: bytes) -> str:
    """The pseudonym of ``conversation_id`` under ``key``."""
    digest = hmac.new(key, conversation_id.encode(), hashlib.sha256).hexdigest()
    return PREFIX + digest[:_DIGITS]


class Pseudonyms:
    """This process's way of showing conversation ids in traces: plain, or by a key found once."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # re-entered should the key source log inside a span
        self._plain = False
        self._key: bytes | None = None
        self._source: Callable[[], bytes] | None = None
        self._own: bytes | None = None  # this process's key, while no other is known

    def configure(self, *, key: str | None, plain: bool, source: Callable[[], bytes] | None = None) -> None:
        """Use ``key`` (the setting; None: ask ``source`` when first needed) or plain ids."""
        with self._lock:
            self._plain = plain
            self._key = key.encode() if key else None
            self._source = source

    def show(self, conversation_id: str) -> str:
        """What a span or a span-linked log line shows for ``conversation_id``."""
        if self._plain:
            return conversation_id
        return pseudonym(conversation_id, self._key if self._key is not None else self._find_key())

    def _find_key(self) -> bytes:
        with self._lock:
            if self._key is not None:
                return self._key
            if self._source is not None:
                try:
                    self._key = self._source()
                    return self._key
                except Exception as exc:  # asked again next time: one outage must not split the fleet for good
                    log.warning("could not read the fleet's trace-id key (%s): conversation ids hidden with a key "
                                "of this process's meanwhile", exc)
            elif self._own is None:
                log.warning("no trace-id key (PARLEY_TRACE_ID_KEY) and no Redis to keep one: conversation ids are "
                            "hidden with a key of this process's")
            if self._own is None:
                self._own = secrets.token_bytes(32)
            return self._own


#: The process's pseudonyms, configured by whoever opens its store (:func:`worker.queue.connections.build_store`).
PSEUDONYMS = Pseudonyms()


def shown(attributes: Mapping[str, V] | None) -> Mapping[str, V] | None:
    """``attributes`` with every conversation id as :data:`PSEUDONYMS` shows it."""
    if not attributes or ID_ATTRIBUTES.isdisjoint(attributes):
        return attributes
    return {k: PSEUDONYMS.show(v) if k in ID_ATTRIBUTES and isinstance(v, str) else v  # type: ignore[misc]
            for k, v in attributes.items()}
