"""The producers' two busiest operations answered straight from the ASGI scope, ahead of Starlette's router: POST
``/v1/conversations/{conversation_id}/messages`` and ``.../events``.

Why: for a small input, the accept on the event loop is cheap enough that what surrounds it showed: Starlette's
exception middleware, its router (the routes' patterns tried in order), the :class:`~starlette.requests.Request`, its
headers and the body's stream, the handler chosen by method. This module reads what the API needs (the method, the
path, three headers, the body's messages) from the scope and the ASGI messages and nothing else.

What it does not change is the answer: authenticating, the body's limit, parsing and validating, the accept, the
answers and their headers, the span and the metric are :func:`worker.ingress.api.serve`'s, the same function the
routes call with the same work (:attr:`~worker.ingress.api.Endpoints.runs`); the paths are matched with Starlette's
own pattern of the route. Anything else falls through to the Starlette app unchanged: another method on these paths
(405 with ``Allow``), a path the pattern does not take (a trailing slash, an id holding an encoded ``/``), an app
mounted under a ``root_path``. It runs as Starlette middleware, inside its ServerErrorMiddleware, so an unexpected
error is the same 500 as on the route.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from functools import partial
from typing import Any

from starlette.requests import ClientDisconnect
from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from worker.envelopes.producer_bodies import OPERATIONS, Operation
from worker.ingress.api import Call, Endpoints, Run, serve
from worker.ingress.body import read_limited

#: The operations served here: a game engine's steady traffic. The rest are rare enough for the router.
FAST_OPERATIONS = frozenset({"send_message", "send_event"})
_WANTED = frozenset({b"authorization", b"traceparent", b"content-length"})


class FastInputs:
    """Starlette middleware: ``Middleware(FastInputs, endpoints=...)``."""

    def __init__(self, app: ASGIApp, endpoints: Endpoints) -> None:
        self.app = app
        self._api = endpoints.api
        self._routes: list[tuple[re.Pattern[str], dict[str, Any], Operation, Run]] = [
            (*_pattern(op.path), op, endpoints.runs[op.operation_id])
            for op in OPERATIONS if op.operation_id in FAST_OPERATIONS and op.method == "POST"]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = self._match(scope)
        if found is None:
            await self.app(scope, receive, send)
            return
        op, run, params = found
        headers = _headers(scope)
        call = Call("POST", headers.get(b"authorization"), headers.get(b"traceparent"), params,
                    partial(_read, headers.get(b"content-length"), receive))
        response = await serve(self._api, op, run, call)
        await response(scope, receive, send)

    def _match(self, scope: Scope) -> tuple[Operation, Run, dict[str, Any]] | None:
        """The operation, its work and the path's parameters, as the route's pattern reads them; ``None``: not ours."""
        if scope["type"] != "http" or scope["method"] != "POST" or scope.get("root_path"):
            return None
        path = scope["path"]
        for pattern, convertors, op, run in self._routes:
            matched = pattern.match(path)
            if matched is not None:
                return op, run, {k: convertors[k].convert(v) for k, v in matched.groupdict().items()}
        return None


def _pattern(path: str) -> tuple[re.Pattern[str], dict[str, Any]]:
    """The route's pattern and its parameters' convertors, as Starlette's ``Route`` compiles them."""
    pattern, _, convertors = compile_path(path)
    return pattern, convertors


def _headers(scope: Scope) -> Mapping[bytes, str]:
    """The headers the API reads, the first of each name and decoded as Starlette's ``Headers.get`` does."""
    found: dict[bytes, str] = {}
    for name, value in scope["headers"]:
        if name in _WANTED and name not in found:
            found[name] = value.decode("latin-1")
    return found


async def _read(declared: str | None, receive: Receive, limit: int) -> bytearray:
    return await read_limited(declared, _chunks(receive), limit)


async def _chunks(receive: Receive) -> AsyncIterator[bytes]:
    """The body's chunks, as Starlette's ``Request.stream`` gives them (a disconnect: ``ClientDisconnect``)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return
