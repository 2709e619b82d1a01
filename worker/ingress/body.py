"""Reading a request body within a limit (the webhook and the producers' API share it, and the API's fast path reads
the ASGI messages themselves: :mod:`worker.ingress.fast_inputs`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request


class TooLarge(Exception):
    """The body passed the limit (answered 413)."""


async def read_body(request: Request, limit: int) -> bytearray:
    """The body of a Starlette request (see :func:`read_limited`)."""
    return await read_limited(request.headers.get("content-length"), request.stream(), limit)


async def read_limited(declared: str | None, chunks: AsyncIterator[bytes], limit: int) -> bytearray:
    """The body, refused as soon as it passes ``limit`` (the ``declared`` Content-Length first, then each chunk as it
    comes): an oversized body is never held whole."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge
    body = bytearray()
    async for chunk in chunks:
        if len(body) + len(chunk) > limit:
            raise TooLarge
        body += chunk
    return body  # not copied into bytes: the HMAC and the JSON decoder read a bytearray as well
