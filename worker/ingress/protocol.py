"""The webhook's HTTP protocol for uvicorn (``--http worker.ingress.protocol:NoDelayHTTP``): uvicorn's own choice
(httptools when installed, else h11) with ``TCP_NODELAY`` set on every accepted connection.

Why: with ``--workers`` above 1 uvicorn's supervisor binds the listening socket itself, with ``proto`` 0; accepted
sockets inherit it and asyncio (uvloop too) only turns Nagle's algorithm off when ``proto`` is ``IPPROTO_TCP``. A
response then goes out as two small segments, the second held until the client's delayed ACK: every keep-alive
request after the first took ~44 ms here (a producer over HTTP managed 80 inputs/s against thousands without it).
Known upstream (uvicorn issue 3149, open as of uvicorn 0.54); setting the option twice is harmless once it is fixed.
"""

from __future__ import annotations

import asyncio
import socket

from uvicorn.protocols.http.auto import AutoHTTPProtocol


def no_delay(transport: asyncio.BaseTransport) -> None:
    """Turn Nagle's algorithm off on a TCP connection (a Unix socket or an unknown transport is left alone)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class NoDelayHTTP(AutoHTTPProtocol):  # type: ignore[misc,valid-type]  # uvicorn picks the class at import
    """uvicorn's HTTP protocol, with ``TCP_NODELAY`` on the connection before the first byte is read."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        no_delay(transport)
        super().connection_made(transport)
