"""Scripts sent from the event loop over one pipelined connection: the asyncio twin of
:class:`~worker.store.fast_scripts.FastScript` (same script text, keys and arguments, same errors).

Why not ``redis.asyncio``: its per-command layer (pool, timeouts, health checks, event dispatch) costs about twice
the CPU of the blocking client's round trip (138 µs against 69 µs a PING here, uvloop; a bare asyncio connection
25 µs), which would have cost the HTTP API more than the thread hop it saves. So
:class:`AsyncWire` is a bare asyncio protocol with hiredis's reader: one connection per event loop, every caller's
commands written as they come and the replies handed back in order (Redis answers a connection's commands in the
order it got them), so concurrent requests share the connection without a pool or a lock, and a caller that is
cancelled (an HTTP client gone) leaves its reply to be read and dropped, never handed to the next caller.

What it keeps of redis-py: the server's address, database, user and password and the socket timeouts come from
the blocking client's pool (:meth:`WireSettings.of`); a lost connection or a reply later than ``socket_timeout``
fails every command in flight with redis-py's ``ConnectionError``/``TimeoutError`` and the connection is opened
again; the call is then retried with the blocking client's backoff and number of retries, which is safe for the
scripts sent here (ACCEPT is idempotent by input id); a server that forgot the script gets ``SCRIPT LOAD``. With
replication on, ``WAIT`` follows the script on the same connection, as the blocking store's pipeline does. TLS
(``rediss://``) is not spoken: :meth:`WireSettings.of` answers ``None`` and the caller keeps the blocking path.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import hiredis
import redis
from redis.backoff import AbstractBackoff, NoBackoff
from redis.exceptions import ConnectionError, NoScriptError, ResponseError, TimeoutError

from worker.store.replication import Replication


@dataclass(frozen=True)
class WireSettings:
    """Where and how to connect: the blocking client's own settings."""

    host: str = "localhost"
    port: int = 6379
    path: str | None = None  # a Unix socket instead of host and port
    db: int = 0
    username: str | None = None
    password: str | None = None
    socket_timeout: float | None = None
    connect_timeout: float | None = None
    retries: int = 0
    backoff: AbstractBackoff = field(default_factory=NoBackoff)

    @classmethod
    def of(cls, client: Any) -> WireSettings | None:
        """The settings of a plain ``redis.Redis`` on TCP or a Unix socket; ``None`` for anything else (TLS, a
        Sentinel or Cluster client, fakeredis, a credential provider)."""
        if type(client) is not redis.Redis or getattr(client, "_single_connection_client", False):
            return None
        pool = client.connection_pool
        if type(pool) not in (redis.ConnectionPool, redis.BlockingConnectionPool):
            return None
        kw = pool.connection_kwargs
        if pool.connection_class not in (redis.Connection, redis.UnixDomainSocketConnection) or \
                kw.get("credential_provider") is not None:
            return None
        retry = kw.get("retry")
        return cls(host=kw.get("host", "localhost"), port=int(kw.get("port", 6379)), path=kw.get("path"),
                   db=int(kw.get("db") or 0), username=kw.get("username"), password=kw.get("password"),
                   socket_timeout=kw.get("socket_timeout"),
                   connect_timeout=kw.get("socket_connect_timeout") or kw.get("socket_timeout"),
                   retries=retry.get_retries() if retry is not None else 0,
                   backoff=retry._backoff if retry is not None else NoBackoff())


def _error(reply: ResponseError) -> ResponseError:
    text = str(reply)
    return NoScriptError(text) if text.startswith("NOSCRIPT") else reply


class _Protocol(asyncio.Protocol):
    """One connection: replies are matched to the commands in flight, in order."""

    def __init__(self, socket_timeout: float | None) -> None:
        self._reader = hiredis.Reader(replyError=ResponseError)
        self._waiting: deque[asyncio.Future[Any]] = deque()
        self._transport: asyncio.Transport | None = None
        self._timeout = socket_timeout
        self._timer: asyncio.TimerHandle | None = None
        self._unsent: list[bytes] = []
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while (reply := self._reader.gets()) is not False:
            fut = self._waiting.popleft()
            if not fut.done():  # a cancelled caller's reply is dropped here, in its turn
                fut.set_result(reply)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(ConnectionError(f"Redis connection lost: {exc or 'closed by the server'}"))

    def _fail(self, error: Exception) -> None:
        self.lost = True
        if self._timer is not None:
            self._timer.cancel()
        while self._waiting:
            fut = self._waiting.popleft()
            if not fut.done():
                fut.set_exception(error)
        if self._transport is not None:
            self._transport.abort()

    def _arm(self) -> None:
        """The socket timeout, counted from the last reply while commands are in flight."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._waiting and self._timeout:
            self._timer = asyncio.get_running_loop().call_later(
                self._timeout, self._fail, TimeoutError(f"no reply from Redis within {self._timeout} s"))

    def send(self, commands: Sequence[tuple[Any, ...]]) -> list[asyncio.Future[Any]]:
        if self.lost or self._transport is None:
            raise ConnectionError("Redis connection lost")
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in commands]
        idle = not self._waiting
        self._waiting.extend(futures)
        if not self._unsent:  # the callers of one turn of the loop share a write (one system call)
            loop.call_soon(self._flush)
        self._unsent.extend(hiredis.pack_command(c) for c in commands)
        if idle:
            self._arm()
        return futures

    def _flush(self) -> None:
        if self._unsent and self._transport is not None and not self.lost:
            self._transport.write(b"".join(self._unsent))
        self._unsent.clear()


class AsyncWire:
    """The event loop's connection to Redis (opened on first use, again after it was lost)."""

    def __init__(self, settings: WireSettings) -> None:
        self.settings = settings
        self._protocol: _Protocol | None = None
        self._opening: asyncio.Lock | None = None

    async def _connected(self) -> _Protocol:
        if self._protocol is not None and not self._protocol.lost:
            return self._protocol
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:  # one opening at a time; the others wait for it
            if self._protocol is None or self._protocol.lost:
                self._protocol = await asyncio.wait_for(self._open(), self.settings.connect_timeout)
        return self._protocol

    async def _open(self) -> _Protocol:
        s, loop = self.settings, asyncio.get_running_loop()
        try:
            if s.path:
                _, protocol = await loop.create_unix_connection(lambda: _Protocol(s.socket_timeout), s.path)
            else:
                _, protocol = await loop.create_connection(lambda: _Protocol(s.socket_timeout), s.host, s.port)
        except OSError as exc:
            raise ConnectionError(f"cannot connect to Redis at {s.path or f'{s.host}:{s.port}'}: {exc}") from exc
        hello: list[tuple[Any, ...]] = []
        if s.password:
            hello.append(("AUTH", *([s.username] if s.username else []), s.password))
        if s.db:
            hello.append(("SELECT", s.db))
        for reply in await asyncio.gather(*protocol.send(hello)) if hello else ():
            if isinstance(reply, ResponseError):
                protocol._fail(ConnectionError(f"Redis refused the connection: {reply}"))
                raise _error(reply)
        return protocol

    async def call(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """The replies to ``commands``, sent together (an error reply is returned, not raised)."""
        protocol = await self._connected()
        return [await fut for fut in protocol.send(commands)]


class AsyncScript:
    """``await script(keys, args, what=...)``: the script's reply (see the module's docstring); ``what`` names the
    write in the replication warning."""

    def __init__(self, wire: AsyncWire, text: str, replication: Replication) -> None:
        self._wire = wire
        self._text = text
        self._sha = hashlib.sha1(text.encode()).hexdigest()
        self._replication = replication

    @property
    def wire(self) -> AsyncWire:
        """The connection it is sent on (other commands of the same loop may share it)."""
        return self._wire

    async def __call__(self, keys: Sequence[Any], args: Sequence[Any], *, what: str) -> Any:
        s = self._wire.settings
        failures = 0
        while True:
            try:
                return await self._send(keys, args, what)
            except (ConnectionError, TimeoutError):
                failures += 1
                if failures > s.retries:
                    raise
                await asyncio.sleep(s.backoff.compute(failures))

    async def _send(self, keys: Sequence[Any], args: Sequence[Any], what: str) -> Any:
        try:
            return await self._evalsha(keys, args, what)
        except NoScriptError:
            [loaded] = await self._wire.call([("SCRIPT", "LOAD", self._text)])
            if isinstance(loaded, ResponseError):
                raise _error(loaded) from None
            return await self._evalsha(keys, args, what)

    async def _evalsha(self, keys: Sequence[Any], args: Sequence[Any], what: str) -> Any:
        commands: list[tuple[Any, ...]] = [("EVALSHA", self._sha, len(keys), *keys, *args)]
        if self._replication.replicas > 0:
            commands.append(("WAIT", self._replication.replicas, self._replication.timeout_ms))
        reply, *acked = await self._wire.call(commands)
        if isinstance(reply, ResponseError):
            raise _error(reply)
        if acked:
            self._replication.check(acked[0], what)
        return reply
