"""The one mapping of redis-py's errors to the project's (:mod:`worker.errors`), as a decorator every store
method that talks to Redis wears."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.exceptions as rexc

from worker.errors import StoreError, StoreUnavailableError

T = TypeVar("T")

# What an outage looks like: the caller may retry (the same command may succeed once Redis is back).
_UNAVAILABLE = (rexc.ConnectionError, rexc.TimeoutError, rexc.BusyLoadingError, rexc.TryAgainError,
                rexc.ClusterDownError)
# Refusals redis-py reports as a plain ResponseError while they too only mean "not now".
_UNAVAILABLE_REPLIES = ("LOADING", "MASTERDOWN", "READONLY")


def _mapped(exc: Exception) -> Exception:
    """The project's error for one of redis-py's outages or refusals."""
    if isinstance(exc, _UNAVAILABLE):
        return StoreUnavailableError(f"Redis unavailable: {type(exc).__name__}: {exc}")
    if any(reply in str(exc) for reply in _UNAVAILABLE_REPLIES):
        return StoreUnavailableError(f"Redis unavailable: {exc}")
    return StoreError(f"Redis refused a command: {exc}")


def store_errors(fn: Callable[..., T]) -> Callable[..., T]:
    """Map redis-py's errors to the project's: an outage is retryable
    (:class:`~worker.errors.StoreUnavailableError`), a refused command is not (:class:`~worker.errors.StoreError`)."""

    @functools.wraps(fn)
    def inner(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except (*_UNAVAILABLE, rexc.ResponseError) as exc:
            raise _mapped(exc) from exc
    return inner


def async_store_errors(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """:func:`store_errors` for a coroutine function (``redis.asyncio`` raises the same errors)."""

    @functools.wraps(fn)
    async def inner(*args: Any, **kwargs: Any) -> T:
        try:
            return await fn(*args, **kwargs)
        except (*_UNAVAILABLE, rexc.ResponseError) as exc:
            raise _mapped(exc) from exc
    return inner
