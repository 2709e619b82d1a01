"""Reading a request body within a limit (the webhook and the producers' API share it)."""

from __future__ import annotations

from starlette.requests import Request


class TooLarge(Exception):
    """The body passed the limit (answered 413)."""


async def read_body(request: Request, limit: int) -> bytearray:
    """The body, refused as soon as it passes ``limit`` (the declared length first, then each chunk as it comes):
    an oversized body is never held whole."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge
    body = bytearray()
    async for chunk in request.stream():
        if len(body) + len(chunk) > limit:
            raise TooLarge
        body += chunk
    return body  # not copied into bytes: the HMAC and the JSON decoder read a bytearray as well
