"""The one mapping of redis-py's errors to the project's (:mod:`worker.errors`), as a decorator every store
method that talks to Redis wears."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import redis.exceptions as rexc

from worker.errors import StoreError, StoreUnavailableError

T = TypeVar("T")

# What an outage looks like: the caller may retry (the same command may succeed once Redis is back).
_UNAVAILABLE = (rexc.ConnectionError, rexc.TimeoutError, rexc.BusyLoadingError, rexc.TryAgainError,
                rexc.ClusterDownError)
# Refusals redis-py reports as a plain ResponseError while they too only mean "not now".
_UNAVAILABLE_REPLIES = ("LOADING", "MASTERDOWN", "READONLY")


def store_errors(fn: Callable[..., T]) -> Callable[..., T]:
    """Map redis-py's errors to the project's: an outage is retryable
    (:class:`~worker.errors.StoreUnavailableError`), a refused command is not (:class:`~worker.errors.StoreError`)."""

    @functools.wraps(fn)
    def inner(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except _UNAVAILABLE as exc:
            raise StoreUnavailableError(f"Redis unavailable: {type(exc).__name__}: {exc}") from exc
        except rexc.ResponseError as exc:
            if any(reply in str(exc) for reply in _UNAVAILABLE_REPLIES):
                raise StoreUnavailableError(f"Redis unavailable: {exc}") from exc
            raise StoreError(f"Redis refused a command: {exc}") from exc
    return inner
