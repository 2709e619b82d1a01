"""The producer's accept on the event loop: the HTTP API queues an input without a thread hop.

It is the blocking store's accept (:meth:`~worker.store.mailbox.MailboxStore.accept`) sent over the loop's own
pipelined connection (:mod:`worker.store.async_scripts`):
the same ACCEPT script, built with the same KEYS and ARGV by the store itself (``_accept_call``), answered the same
way (``_accepted``: a duplicate, or :class:`~worker.errors.InboxFullError` for a full mailbox) and with redis-py's
errors mapped the same way (an outage is :class:`~worker.errors.StoreUnavailableError`). Nothing of the mailbox's
semantics lives here, only the transport.

Only a standalone Redis without TLS qualifies (:func:`for_store` answers ``None`` otherwise, and the caller keeps
the blocking accept in a worker thread): a Cluster client adds to the sweeper's set in a separate command first, and
a Sentinel-managed client finds its master through the sentinels; fakeredis has no wire.

An asyncio connection belongs to the event loop that opened it, so the client is built per running loop
(uvicorn runs one per process; Starlette's test client may start a new one for each request).
"""

from __future__ import annotations

import asyncio

from worker.store import lua
from worker.store.answers import AcceptResult, WakePush
from worker.store.async_scripts import AsyncScript, AsyncWire, WireSettings
from worker.store.mailbox import MailboxStore
from worker.store.redis_errors import async_store_errors
from worker.store.script_replies import AcceptReply


class AsyncAccept:
    """:meth:`accept` on the running event loop, for ``store`` (build it with :func:`for_store`)."""

    def __init__(self, store: MailboxStore) -> None:
        self.store = store
        self._loop: asyncio.AbstractEventLoop | None = None
        self._script: AsyncScript | None = None

    def _script_for_loop(self) -> AsyncScript:
        loop = asyncio.get_running_loop()
        if self._script is None or self._loop is not loop:
            settings = WireSettings.of(self.store._client)
            assert settings is not None  # for_store checked it
            self._script = AsyncScript(AsyncWire(settings), lua.ACCEPT, self.store._scripts.replication)
            self._loop = loop
        return self._script

    @async_store_errors
    async def accept(self, cid: str, envelope: bytes, input_id: str, *, max_inbox: int | None = None,
                     inbound: bool = False, wake: WakePush | None = None) -> AcceptResult:
        """As :meth:`MailboxStore.accept <worker.store.mailbox.MailboxStore.accept>`, awaited on the loop (never on a
        Cluster: :func:`for_store`)."""
        limit = max_inbox or self.store.limits.max_inbox
        script_keys, args = self.store._accept_call(cid, envelope, input_id, limit, inbound, wake=wake)
        reply = await self._script_for_loop()(script_keys, args, what="accept")
        return self.store._accepted(cid, AcceptReply.parse(reply), limit)


def for_store(store: MailboxStore) -> AsyncAccept | None:
    """The event loop's accept for ``store``, or ``None`` when its client does not qualify (see the module)."""
    if store._cluster or WireSettings.of(store._client) is None:
        return None
    return AsyncAccept(store)
