"""MCP tools of servers over stdio: a child process of each worker process, through the official SDK's stdio client.

The server is started on first use in a process (the first turn's tool listing), never at load time: under the
prefork pool, load time may be the main process, and a child forked from it must not share its pipes. It gets
only a minimal environment (the SDK's ``get_default_environment()``: ``PATH``, ``HOME``, ``USER``, ``LOGNAME``,
``SHELL``, ``TERM``) plus the manifest's ``env``, so the worker's secrets (model and WhatsApp tokens) never reach it.

When the server exits (its stdout closes), its tools are withdrawn, the calls in flight become error results the
model reads, and it is started again: at once the first time, then after a doubling delay (up to
:data:`MAX_RESTART_DELAY` s) while it keeps dying young, so a crashing server does not spin. A turn that comes
while a start is under way waits for it (up to the start wait). :func:`stop_all` ends this process's servers at
worker shutdown (stdin closed, then SIGTERM and SIGKILL, by the SDK); a server whose worker was killed sees its
stdin close and exits by itself.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client

from worker.conversation.tools import Tool
from worker.tools.mcp_source import EventLoopThread, McpServer, describe_error

log = logging.getLogger(__name__)

# A run shorter than this counts as dying young: from the second in a row, the next start waits
# (FIRST_RESTART_DELAY, doubling up to MAX_RESTART_DELAY).
STABLE_SECONDS = 10.0
FIRST_RESTART_DELAY = 0.5
MAX_RESTART_DELAY = 30.0
# How long stop waits for the SDK's shutdown (stdin closed, 2 s, then SIGTERM, then SIGKILL).
STOP_WAIT = 10.0

_started: set[McpStdioServer] = set()
_started_lock = threading.Lock()


class McpStdioServer(McpServer):
    """One stdio server in this process (see the module docstring)."""

    def __init__(self, params: StdioServerParameters, *, bridge: EventLoopThread, call_timeout: float,
                 refresh_seconds: float, start_wait: float) -> None:
        super().__init__(params.command, headers={}, bridge=bridge, call_timeout=call_timeout,
                         refresh_seconds=refresh_seconds)
        self.label = params.command  # never the args or env, which may carry a token
        self.params = params
        self.start_wait = start_wait
        self.young_deaths = 0
        self._pid = 0
        self._lock = threading.Lock()
        self._future: concurrent.futures.Future[None] | None = None

    def start(self, wait: float) -> None:
        """Nothing yet: the server starts on first use in the process that uses it."""

    def tools(self, taken: set[str]) -> list[Tool]:
        self._ensure()
        return super().tools(taken)

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        self._ensure()
        return super().call(name, arguments)

    def _ensure(self) -> None:
        """Start the server if this process has not; wait for a start or restart under way."""
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():  # a fresh process (or a forked child): nothing inherited is ours
                    self.up, self._session, self._stopping, self.young_deaths = False, None, False, 0
                    self._first, self._wake = threading.Event(), None
                    self._future = asyncio.run_coroutine_threadsafe(self._keep_session(), self.bridge.loop)
                    self._pid = os.getpid()
                    with _started_lock:
                        _started.add(self)
        if not self.up and not self._first.wait(self.start_wait):
            log.warning("MCP server %s did not list its tools within %.1f s", self.label, self.start_wait)

    async def _keep_session(self) -> None:
        self._wake = asyncio.Event()
        while not self._stopping:
            began = time.monotonic()
            try:
                await self._session_once()
            except Exception as exc:  # it could not start, or broke the session: start it again
                log.warning("MCP server %s failed: %s", self.label, describe_error(exc))
            self.up, self._session = False, None
            if self._stopping:
                break
            self.young_deaths = self.young_deaths + 1 if time.monotonic() - began < STABLE_SECONDS else 0
            if self.young_deaths > 1:  # dying young again: wait (a first death is started again at once)
                delay = min(MAX_RESTART_DELAY, FIRST_RESTART_DELAY * 2 ** (self.young_deaths - 2))
                log.warning("MCP server %s: starting it again in %.1f s", self.label, delay)
                self._first.set()  # the turns meanwhile go on without its tools
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), delay)  # stop() cuts the wait short
                except TimeoutError:
                    pass
                self._first.clear()
        self._first.set()

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        """The child's pipes, its stdout relayed so that its end (the process exited) is seen at once."""
        async with stdio_client(self.params, errlog=sys.__stderr__ or sys.stderr) as (read_stream, write_stream):
            send, receive = anyio.create_memory_object_stream[Any](0)
            async with anyio.create_task_group() as group:
                group.start_soon(self._relay, read_stream, send)
                yield receive, write_stream
                group.cancel_scope.cancel()

    async def _relay(self, source: Any, sink: Any) -> None:
        async with sink:
            async for message in source:
                await sink.send(message)
        if not self._stopping:
            log.warning("MCP server %s exited; starting it again", self.label)
            self._first.clear()  # before up turns false: a turn that sees it down waits for the restart
            self._lost()

    def stop(self) -> None:
        """End the server if this process started it, waiting for the process to be gone."""
        if self._pid != os.getpid() or self._future is None:
            return
        super().stop()
        try:
            self._future.result(STOP_WAIT)
        except Exception as exc:
            log.warning("MCP server %s did not stop cleanly: %s", self.label, describe_error(exc))
        self._pid, self._future = 0, None
        with _started_lock:
            _started.discard(self)


def stop_all() -> None:
    """End every stdio server this process started (worker shutdown)."""
    with _started_lock:
        servers = list(_started)
    for server in servers:
        server.stop()


atexit.register(stop_all)  # a process that exits without the worker's shutdown signal
