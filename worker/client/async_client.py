"""The producer's API awaited on an event loop: what the HTTP API (``/v1/``) uses to queue an input without a thread
hop per request.

It is :class:`~worker.client.ConversationClient`, not a second one: the input is built and checked by the client's
``inputs`` (its checks and defaults), accepted by the store's ACCEPT script through :mod:`worker.store.async_mailbox`
(the same keys, deduplication and backpressure), and the worker woken by the client's ``intake`` rule: by the accept
script itself when the client's broker is the store's Redis (:class:`worker.queue.wakeup.AcceptWake`), else by the
client's waker (a Celery publish, a blocking call) in a worker thread, and only for an input that needs one.
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread

from worker.client import CheckedInput, ConversationClient, Submitted
from worker.envelopes.addresses import validate_conversation_id
from worker.store import async_mailbox


class AsyncClient:
    """``await accept(checked)``: an input the client's ``inputs`` built, accepted on the running loop; ``await
    send(kind, conversation_id, arguments)`` builds it first. Only a plain input (one that is not held for later and
    ends no burst: :attr:`~worker.client.builder.CheckedInput.plain`) is sent this way; anything else goes through the
    blocking client. Build it with :meth:`for_client`."""

    def __init__(self, client: ConversationClient, accept: async_mailbox.AsyncAccept) -> None:
        self._client = client
        self._accept = accept

    @classmethod
    def for_client(cls, client: ConversationClient) -> AsyncClient | None:
        """``None`` when the client's store cannot accept on the loop (a Cluster, Sentinel, TLS, fakeredis: see
        :mod:`worker.store.async_mailbox`); the caller then runs the blocking client in a worker thread."""
        accept = async_mailbox.for_store(client.store)
        return None if accept is None else cls(client, accept)

    async def resolve(self, conversation_id: str) -> str:
        """:meth:`ConversationClient.resolve <worker.client.ConversationClient.resolve>` awaited on the loop."""
        return await self._accept.resolve_identity(validate_conversation_id(conversation_id))

    async def send(self, kind: str, conversation_id: str, arguments: dict[str, Any]) -> Submitted:
        """:meth:`accept` of the input of ``kind`` that ``arguments`` make (``client.inputs.build``)."""
        return await self.accept(self._client.inputs.build(kind, conversation_id, arguments))

    async def accept(self, checked: CheckedInput) -> Submitted:
        """Accept a plain input on the loop. Raises :class:`~worker.errors.InputError` (a full mailbox) and
        :class:`~worker.errors.StoreError` (Redis down) as the client does."""
        assert checked.plain, "an input that is held or ends a burst goes through the blocking client"
        client, intake = self._client, self._client.intake
        checked = intake.traced(checked)
        env = checked.envelope
        result = await self._accept.accept(env.conversation_id, env.to_bytes(), env.message_id, inbound=checked.inbound,
                                           wake=client.accept_wake_push(env.conversation_id))
        if intake.needs_wake(result):
            return await anyio.to_thread.run_sync(intake.answered, checked, result)
        return intake.answered(checked, result)
