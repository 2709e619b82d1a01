"""The producer's API awaited on an event loop: what the HTTP API (``/v1/``) uses to queue an input without a thread
hop per request.

It is :class:`~worker.client.ConversationClient`, not a second one: the input is validated and its envelope built by
the client's own methods (``send_message``, ``send_event``, ``reset``, with the client's checks and defaults:
:mod:`worker.client.prepared`), then accepted by the store's ACCEPT script through :mod:`worker.store.async_mailbox` (the
same keys, deduplication and backpressure), and the worker woken exactly when the client would wake it: by the
accept script itself when the client's broker is the store's Redis (:class:`worker.queue.wakeup.AcceptWake`), else by the
client's waker (a Celery publish, a blocking call) in a worker thread, and only for an input that needs one (the first
of a burst).
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread

from worker.client import ConversationClient, Submitted
from worker.client.prepared import Preparer
from worker.store import async_mailbox


class AsyncClient:
    """``await send(method, conversation_id, arguments)``: ``client.<method>(conversation_id, **arguments)`` with the
    accept awaited on the running loop. Build it with :meth:`for_client`."""

    def __init__(self, client: ConversationClient, accept: async_mailbox.AsyncAccept) -> None:
        self._preparer = Preparer(client)
        self._accept = accept

    @classmethod
    def for_client(cls, client: ConversationClient) -> AsyncClient | None:
        """``None`` when the client's store cannot accept on the loop (a Cluster, Sentinel, TLS, fakeredis: see
        :mod:`worker.store.async_mailbox`); the caller then runs the blocking client in a worker thread."""
        accept = async_mailbox.for_store(client.store)
        return None if accept is None else cls(client, accept)

    async def send(self, method: str, conversation_id: str, arguments: dict[str, Any]) -> Submitted:
        """Raises :class:`~worker.errors.InputError` (a bad input, a full mailbox) and
        :class:`~worker.errors.StoreError` (Redis down) as the client does."""
        prepared = self._preparer.prepare(method, conversation_id, arguments)
        env = prepared.envelope
        result = await self._accept.accept(env.conversation_id, env.to_bytes(), env.message_id,
                                           inbound=prepared.inbound,
                                           wake=self._preparer.client.accept_wake_push(env.conversation_id))
        if self._preparer.needs_wake(result):
            await anyio.to_thread.run_sync(self._preparer.client.publish_wake, env.conversation_id)
        return Submitted(env.conversation_id, env.message_id, result.duplicate, result.depth)
