"""The producer's accept on the event loop: the HTTP API queues an input without a thread hop.

It is the blocking store's accept (:meth:`~worker.store.accepts.AcceptStore.accept`) sent over the loop's own
pipelined connection (:mod:`worker.store.async_scripts`):
the same ACCEPT script, built with the same KEYS and ARGV by the store itself (``accept_request``), answered the same
way (``accept_answer``: a duplicate, or :class:`~worker.errors.InboxFullError` for a full mailbox) and with redis-py's
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
from worker.store.accepts import AcceptStore
from worker.store.answers import AcceptResult, WakePush
from worker.store.async_scripts import AsyncScript, AsyncWire, WireSettings
from worker.store.identities import Link
from worker.store.keys import IdentityKeys
from worker.store.redis_errors import async_store_errors


class AsyncAccept:
    """:meth:`accept` on the running event loop, for ``store`` (build it with :func:`for_store`)."""

    def __init__(self, store: AcceptStore, wire: WireSettings) -> None:
        self.store = store
        self._wire = wire
        self._loop: asyncio.AbstractEventLoop | None = None
        self._script: AsyncScript | None = None

    def _script_for_loop(self) -> AsyncScript:
        loop = asyncio.get_running_loop()
        if self._script is None or self._loop is not loop:
            self._script = AsyncScript(AsyncWire(self._wire), lua.ACCEPT, self.store.replication)
            self._loop = loop
        return self._script

    @async_store_errors
    async def accept(self, cid: str, envelope: bytes, input_id: str, *, max_inbox: int | None = None,
                     inbound: bool = False, ends_burst: bool = False, wake: WakePush | None = None,
                     reset: bool = False) -> AcceptResult:
        """As :meth:`AcceptStore.accept <worker.store.accepts.AcceptStore.accept>`, awaited on the loop (never on a
        Cluster: :func:`for_store`)."""
        request = self.store.accept_request(cid, envelope, input_id, max_inbox=max_inbox, inbound=inbound,
                                            ends_burst=ends_burst, wake=wake, reset=reset)
        reply = await self._script_for_loop()(request.keys, request.args, what="accept")
        return self.store.accept_answer(request, reply)


    @async_store_errors
    async def resolve_identity(self, ident: str) -> str:
        """As :meth:`IdentityStore.resolve_identity <worker.store.identities.IdentityStore.resolve_identity>`,
        awaited on the loop (one GET on the accept's connection)."""
        [raw] = await self._script_for_loop().wire.call([("GET", IdentityKeys(self.store.prefix).link(ident))])
        link = Link.stored(raw if isinstance(raw, bytes) else None)
        return link.cid if link is not None else ident


def for_store(store: AcceptStore) -> AsyncAccept | None:
    """The event loop's accept for ``store``, or ``None`` when its client does not qualify (see the module)."""
    wire = store.loop_wire()
    return None if wire is None else AsyncAccept(store, wire)
