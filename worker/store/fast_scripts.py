"""The fast path of the hot scripts: EVALSHA packed by hiredis and sent on a pooled connection, without redis-py's
per-command layer.

A turn runs four scripts (accept, begin, commit, the sent mark). Through ``client.evalsha`` each pays redis-py 8's
command machinery on top of the wire: the observability recorders, the debug-log and maintenance-event checks, the
per-command lambdas and the pool's timing (about 56 µs of client CPU a call against 45 µs
for the same EVALSHA sent on a pooled connection, 27 µs over a raw socket). :class:`FastScript` keeps what
matters of that layer and drops the rest:

- the connection comes from the client's own pool and goes back to it, so the pool's bound, its health checks,
  Sentinel's master discovery and TLS/auth settings all apply unchanged;
- a lost connection is retried with the connection's own ``Retry`` (the client's), disconnecting first, exactly
  as redis-py does: the caller sees the same errors after the same number of attempts;
- a server that forgot the script (restart, ``SCRIPT FLUSH``, failover to a replica that never loaded it) gets it
  with ``SCRIPT LOAD`` on the same connection, then the call is sent again.

Only a plain :class:`redis.Redis` qualifies (what :func:`worker.queue.connections.redis_client` builds for a standalone
or Sentinel-managed server). A Cluster client routes by slot and fakeredis has no wire; both keep redis-py's
``Script``, and so does a call inside a pipeline (``client=`` given: the WAIT of :mod:`worker.store.replication`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.exceptions import NoScriptError

_hiredis_pack: Callable[[tuple[Any, ...]], bytes] | None
try:  # a dependency (redis[hiredis]); packing through it directly skips redis-py's per-argument type checks
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover
    _hiredis_pack = None


class FastScript:
    """A registered script whose calls go straight to a pooled connection (see the module's docstring).

    Called like redis-py's ``Script``: ``script(keys=[...], args=[...])``, or with ``client=`` a pipeline.
    """

    def __init__(self, client: redis.Redis, text: str) -> None:
        self._script = client.register_script(text)
        self._pool = client.connection_pool

    @property
    def sha(self) -> str:
        return str(self._script.sha)

    def __call__(self, keys: Sequence[Any] = (), args: Sequence[Any] = (), client: Any = None) -> Any:
        if client is not None:
            return self._script(keys=keys, args=args, client=client)
        conn: Any = self._pool.get_connection()
        try:
            return conn.retry.call_with_retry(lambda: self._send(conn, keys, args), lambda _err: conn.disconnect())
        finally:
            self._pool.release(conn)

    def _send(self, conn: Any, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        try:
            return self._evalsha(conn, keys, args)
        except NoScriptError:
            conn.send_command("SCRIPT", "LOAD", self._script.script)
            self._script.sha = conn.read_response().decode()
            return self._evalsha(conn, keys, args)

    def _evalsha(self, conn: Any, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        command = ("EVALSHA", self._script.sha, len(keys), *keys, *args)
        if _hiredis_pack is not None:
            conn.send_packed_command([_hiredis_pack(command)])
        else:  # pragma: no cover
            conn.send_command(*command)
        return conn.read_response()


def register(client: Any, text: str) -> Any:
    """``text`` as a callable script: a :class:`FastScript` for a plain ``redis.Redis`` client, else redis-py's
    own ``Script`` (Cluster, fakeredis, anything else that only promises ``register_script``)."""
    if type(client) is redis.Redis and not getattr(client, "_single_connection_client", False):
        return FastScript(client, text)
    return client.register_script(text)


def fast_call(client: Any, *command: Any) -> Any:
    """One plain command (a read on the hot path: a reply's recipient) the way :class:`FastScript` sends a script:
    packed by hiredis on a pooled connection of a plain :class:`redis.Redis`, retried as redis-py retries, its raw
    reply (no response callback: ``HGETALL`` answers a flat list). Any other client runs it through redis-py
    (``execute_command``, whose callbacks may shape the reply: a dict for ``HGETALL``)."""
    if type(client) is not redis.Redis or getattr(client, "_single_connection_client", False):
        return client.execute_command(*command)
    pool = client.connection_pool
    conn: Any = pool.get_connection()

    def send() -> Any:
        if _hiredis_pack is not None:
            conn.send_packed_command([_hiredis_pack(command)])
        else:  # pragma: no cover
            conn.send_command(*command)
        return conn.read_response()

    try:
        return conn.retry.call_with_retry(send, lambda _err: conn.disconnect())
    finally:
        pool.release(conn)
