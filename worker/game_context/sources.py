"""Where a turn's live game context comes from: the tool manifest's HTTP endpoint or a Python callable.

Each source's ``fetch(conversation_id, input_id)`` returns the text to add to the turn's system prompt (None:
nothing this turn) or raises :class:`~worker.errors.GameContextError` with the reason (``timeout``,
``unreachable``, ``http_error``, ``not_json``, ``bad_system``, ``oversize``, ``error``); what the turn then does is
:mod:`worker.service.live_context`'s business.
"""

from __future__ import annotations

import inspect
import json
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Literal

import httpx

from worker.errors import GameContextError
from worker.http.pool import ClientPool, single_connection, tls_context

# JSON may spell a character in up to six bytes (\uXXXX): the body a text of max_chars may need, and some room.
_BYTES_PER_CHAR = 6
_BODY_SLACK = 4096
# Threads a callable source runs on (so a hung callable cannot hold a turn past its timeout).
CALLABLE_THREADS = 64


def _pool() -> ClientPool:
    # No read timeout here: each fetch passes its own.
    return ClientPool(lambda: httpx.Client(limits=single_connection(), verify=tls_context()))


_POOL = _pool()


def answer_text(body: bytes) -> str | None:
    """The ``system`` text of a context endpoint's 2xx answer: a JSON object whose ``system`` is a string, or
    null / absent (nothing this turn)."""
    try:
        answer = json.loads(body)
    except ValueError as exc:
        raise GameContextError("not_json", f"the answer is not JSON: {body[:200]!r}") from exc
    if not isinstance(answer, dict):
        raise GameContextError("not_json", f"the answer is a JSON {type(answer).__name__}, not an object")
    system = answer.get("system")
    if system is None or isinstance(system, str):
        return system
    raise GameContextError("bad_system", f'"system" is a {type(system).__name__}, not a string')


class HttpContext:
    """``POST url`` with ``{"conversation_id", "input_id"}``. Connecting and waiting for the answer are each bounded
    by ``timeout`` (httpx's), and reading the body stops once ``timeout`` has passed since the start (checked
    between its chunks, so a server that trickles its answer cannot hold the turn): a fetch takes at most about
    twice ``timeout``. A body longer than a ``max_chars`` text needs is refused without reading the rest."""

    def __init__(self, url: str, *, headers: dict[str, str], timeout: float, max_chars: int,
                 pool: ClientPool | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.url, self.headers, self.timeout = url, headers, timeout
        self.max_bytes = max_chars * _BYTES_PER_CHAR + _BODY_SLACK
        self.pool = pool or _POOL
        self._clock = clock

    def fetch(self, conversation_id: str, input_id: str) -> str | None:
        deadline = self._clock() + self.timeout
        body = {"conversation_id": conversation_id, "input_id": input_id}
        try:
            with self.pool.lease() as client, client.stream("POST", self.url, json=body, headers=self.headers,
                                                            timeout=self.timeout) as response:
                if not 200 <= response.status_code < 300:
                    raise GameContextError("http_error", f"the context endpoint answered HTTP {response.status_code}")
                return answer_text(self._read(response, deadline))
        except httpx.TimeoutException as exc:
            raise GameContextError("timeout", f"no answer within {self.timeout:g} s") from exc
        except httpx.HTTPError as exc:
            raise GameContextError("unreachable", f"the context endpoint is unreachable ({type(exc).__name__})") from exc

    def _read(self, response: httpx.Response, deadline: float) -> bytes:
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > self.max_bytes:
                raise GameContextError("oversize", f"the answer is over {self.max_bytes} bytes")
            if self._clock() > deadline:
                raise GameContextError("timeout", f"the answer took over {self.timeout:g} s")
            chunks.append(chunk)
        return b"".join(chunks)


class _Threads:
    """A process's threads for callable sources, started on first use and again after a fork."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = 0
        self._executor: ThreadPoolExecutor | None = None

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        with self._lock:
            if self._executor is None or self._pid != os.getpid():
                self._executor = ThreadPoolExecutor(CALLABLE_THREADS, thread_name_prefix="parley-context")
                self._pid = os.getpid()
            executor = self._executor
        return executor.submit(fn)


_THREADS = _Threads()


def takes_input_id(fn: Callable[..., Any]) -> Literal["keyword", "positional"] | None:
    """How ``fn`` is given the input id too: as ``input_id=`` when it has a parameter of that name, second when it
    needs two positional arguments (a second one with a default is left alone), else not at all:
    ``fn(conversation_id)``, the documented form, is called with the conversation id alone."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.name == "input_id" and p.kind is not p.POSITIONAL_ONLY for p in params):
        return "keyword"
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    return "positional" if len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params) else None


class CallableContext:
    """``fn(conversation_id)`` (or ``fn(conversation_id, input_id)``, see :func:`takes_input_id`), run on a
    thread of the process so that one that hangs is abandoned after ``timeout`` (it runs on; its answer is
    dropped)."""

    def __init__(self, fn: Callable[..., Any], *, timeout: float) -> None:
        self.fn, self.timeout = fn, timeout
        self._input_id = takes_input_id(fn)

    def fetch(self, conversation_id: str, input_id: str) -> str | None:
        fn, how = self.fn, self._input_id

        def call() -> Any:
            try:
                if how == "keyword":
                    return fn(conversation_id, input_id=input_id)
                return fn(conversation_id, input_id) if how == "positional" else fn(conversation_id)
            except Exception:
                raise
            except BaseException as exc:  # sys.exit() in the game's code (argparse, click): a failed fetch
                raise GameContextError("error", f"the context callable raised {type(exc).__name__}: {exc}") from exc

        future = _THREADS.submit(call)
        try:
            value = future.result(self.timeout)
        except FutureTimeout as exc:
            raise GameContextError("timeout", f"the context callable took over {self.timeout:g} s") from exc
        except Exception as exc:
            raise GameContextError("error", f"the context callable raised {type(exc).__name__}: {exc}") from exc
        if value is None or isinstance(value, str):
            return value
        raise GameContextError("bad_system", f"the context callable returned a {type(value).__name__}, not text")
