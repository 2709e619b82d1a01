"""Helpers for tests: Parley's own, and a deployment's (your tools, compactors and wiring, run without WhatsApp).

- :class:`RecordingChannel` stands in for WhatsApp: it keeps every reply it is asked to send, so a test can run a
  :class:`~worker.service.ConversationService` (or a whole worker) and read what the players would have received.
- :func:`check_history` says what is wrong with a history a provider would refuse (a tool call without its result,
  a result without its call, ...): a custom compactor's output should always check clean.
- :func:`reset_tracing` makes tracing decide again from the environment (a test that changes it in one process).
- :class:`CreatedClients` counts the clients an outbound :class:`~worker.http.pool.ClientPool` makes.

The scripted model that answers without a provider is :class:`worker.ScriptedModel`. Nothing in the product
imports this module.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

import httpx

from worker.conversation.history import repair_history
from worker.conversation.messages import Message
from worker.http.pool import ClientPool
from worker.observability import tracing
from worker.observability.tracing.pseudonyms import PSEUDONYMS

__all__ = ["CreatedClients", "RecordingChannel", "check_history", "reset_tracing"]


class RecordingChannel:
    """A channel that sends nothing and keeps what it was asked to send: ``sent`` holds ``(recipient, text,
    reply_to)`` per message, ``callbacks`` the callback data of each, ``read`` ``(message id, typing)`` per read
    mark. Thread-safe, as a worker's channel must be."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str | None]] = []
        self.callbacks: list[str | None] = []  # the callback data of each send, in the order of ``sent``
        self.read: list[tuple[str, bool]] = []  # (message id, typing) per mark_read
        self._lock = threading.Lock()

    def send_text(self, recipient: str, text: str, *, reply_to: str | None = None,
                  callback_data: str | None = None) -> str:
        with self._lock:
            self.sent.append((recipient, text, reply_to))
            self.callbacks.append(callback_data)
            return f"rec-{len(self.sent)}"

    def mark_read(self, message_id: str, *, typing: bool) -> None:
        with self._lock:
            self.read.append((message_id, typing))


def check_history(messages: Sequence[Message]) -> list[str]:
    """The problems :func:`~worker.conversation.history.repair_history` would fix before sending ``messages`` to
    a provider; empty when the history is valid as it is."""
    return list(repair_history(messages)[1].problems)


def reset_tracing() -> None:
    """Decide again from the environment at the next span, shutting down the tracing set up so far (a test that
    changes the environment in one process)."""
    with tracing._lock:
        if tracing._tracing is not None:
            tracing._tracing.shutdown()
        tracing._tracing, tracing._decided = None, False
    PSEUDONYMS.configure(key=None, plain=False)  # the key (or the source of it) of an earlier test's store forgotten


class CreatedClients:
    """Counts the clients ``pool`` makes from now on, in each process apart (a forked child starts its own pool,
    and its own count): :attr:`count` is this process's."""

    def __init__(self, pool: ClientPool) -> None:
        self._counts: dict[int, int] = {}
        self._lock = threading.Lock()
        make = pool._factory

        def counted() -> httpx.Client:
            with self._lock:
                self._counts[os.getpid()] = self._counts.get(os.getpid(), 0) + 1
            return make()

        pool._factory = counted

    @property
    def count(self) -> int:
        with self._lock:
            return self._counts.get(os.getpid(), 0)
