"""MCP tools: the tools of Model Context Protocol servers over the streamable HTTP transport (official ``mcp`` SDK);
:mod:`worker.tools.mcp_stdio` adds the stdio transport on the same session loop.

The worker is synchronous (threads or gevent pools) and the SDK is asyncio, so each process runs one event loop in
a daemon thread (:class:`EventLoopThread`) and every server keeps one session open on it. A tool call from a worker
thread is a coroutine submitted to that loop and waited for with the call's timeout.

Each server's tools are listed at start, listed again when the server sends ``notifications/tools/list_changed``,
and also every ``PARLEY_MCP_REFRESH_SECONDS`` (a notification can only reach a client while one of its requests or
its GET stream is open, so the timer is the safety net). A server that is down (its session failed, or a call
could not reach it) contributes no tools to the turns that start meanwhile, each such turn counted in
``parley_mcp_server_unavailable_total``; the session reconnects in the background.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
from collections.abc import AsyncIterator, Coroutine, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, TypeVar

import httpx
import mcp.types as mt
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError

from worker.conversation.tools import Tool, current_call, schema_validator
from worker.errors import ToolError
from worker.http.urls import redact_url, redact_urls
from worker.metrics import MCP_UNAVAILABLE, TOOL_CALLS
from worker.tools.http_source import idempotency_key

log = logging.getLogger(__name__)
T = TypeVar("T")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class EventLoopThread:
    """An asyncio loop in a daemon thread, started on first use in each process (a forked child inherits no
    threads); :meth:`run` waits for a coroutine from any other thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None or self._pid != os.getpid():
            with self._lock:
                if self._loop is None or self._pid != os.getpid():
                    loop = asyncio.new_event_loop()
                    threading.Thread(target=loop.run_forever, name="parley-mcp-loop", daemon=True).start()
                    self._loop, self._pid = loop, os.getpid()
        return self._loop

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self._loop is not None and self._pid == os.getpid():
            self._loop.call_soon_threadsafe(self._loop.stop)


class McpServer:
    """One server's session and its cached tool list (see the module docstring)."""

    def __init__(self, url: str, *, headers: dict[str, str], bridge: EventLoopThread, call_timeout: float,
                 refresh_seconds: float, retry_seconds: float = 2.0) -> None:
        self.url = url
        self.label = redact_url(url)  # what logs and metrics show: a token in the URL stays out of them
        self.headers = headers
        self.bridge = bridge
        self.call_timeout = call_timeout
        self.refresh_seconds = refresh_seconds
        self.retry_seconds = min(retry_seconds, refresh_seconds)
        self.listed: list[mt.Tool] = []
        self.up = False
        self._session: ClientSession | None = None
        self._first = threading.Event()
        self._wake: asyncio.Event | None = None
        self._stopping = False

    def start(self, wait: float) -> None:
        """Connect and list in the background; wait up to ``wait`` s for the first listing (a server that is
        down at start is not fatal: its tools appear once it answers)."""
        asyncio.run_coroutine_threadsafe(self._keep_session(), self.bridge.loop)
        if not self._first.wait(wait):
            log.warning("MCP server %s did not list its tools within %.1f s; going on without them", self.label,
                        wait)

    def stop(self) -> None:
        self._stopping = True
        if self._wake is not None:
            self.bridge.loop.call_soon_threadsafe(self._wake.set)

    async def _keep_session(self) -> None:
        self._wake = asyncio.Event()
        while not self._stopping:
            try:
                await self._session_once()
            except Exception as exc:  # the server is down or broke the session: reconnect later
                if self.up or not self._first.is_set():
                    log.warning("MCP server %s is unavailable: %s", self.label, describe_error(exc))
            self.up, self._session = False, None
            self._first.set()
            if not self._stopping:
                await asyncio.sleep(self.retry_seconds)

    async def _session_once(self) -> None:
        assert self._wake is not None
        async with self._transport() as (read_stream, write_stream), \
                ClientSession(read_stream, write_stream, message_handler=self._on_message) as session:
            await session.initialize()
            await self._list(session)
            self._session, self.up = session, True
            self._first.set()
            while not self._stopping:
                try:
                    await asyncio.wait_for(self._wake.wait(), self.refresh_seconds)
                except TimeoutError:
                    pass
                self._wake.clear()
                if self._stopping or not self.up:
                    return  # a call found the server gone: start a new session
                await self._list(session)

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        """The session's read and write streams: here over HTTP (the stdio subclass: a child process's pipes)."""
        # The read timeout stays long: the GET stream that carries notifications is idle most of the time.
        http = httpx.AsyncClient(headers=self.headers, timeout=httpx.Timeout(self.call_timeout, read=300))
        async with http, streamable_http_client(self.url, http_client=http) as (read_stream, write_stream, _):
            yield read_stream, write_stream

    async def _list(self, session: ClientSession) -> None:
        tools: list[mt.Tool] = []
        cursor: str | None = None
        while True:
            page = await session.list_tools(cursor=cursor) if cursor else await session.list_tools()
            tools.extend(page.tools)
            cursor = page.nextCursor
            if not cursor:
                break
        self.listed = [t for t in tools if self._usable_schema(t)]

    def _usable_schema(self, tool: mt.Tool) -> bool:
        """Whether a listed tool's input schema is a valid JSON schema: checked when the tools are listed (and
        said in the log then), so a call never meets a schema that cannot check its arguments."""
        try:
            schema_validator(tool.name, {"type": "object", **(tool.inputSchema or {})})
        except ToolError as exc:
            log.warning("MCP server %s: tool %r left out: %s", self.label, tool.name, exc)
            return False
        return True

    async def _on_message(self, message: Any) -> None:
        changed = isinstance(message, mt.ServerNotification) and isinstance(message.root,
                                                                             mt.ToolListChangedNotification)
        if changed and self._wake is not None:
            self._wake.set()

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        session = self._session
        if session is None or not self.up:
            raise ToolError(f"the MCP server for tool {name!r} is unavailable")
        coro = session.call_tool(name, arguments, read_timeout_seconds=timedelta(seconds=self.call_timeout),
                                 meta=call_meta())
        try:
            result = self.bridge.run(coro, self.call_timeout + 1.0)
        except Exception as exc:
            outcome = "timeout" if isinstance(exc, TimeoutError) or "timed out" in str(exc).lower() else "failed"
            TOOL_CALLS.labels("mcp", outcome).inc()
            if outcome == "failed" and not isinstance(exc, McpError):  # McpError: the server answered
                self._lost()
            raise ToolError(f"MCP tool {name} failed: {describe_error(exc)}") from exc
        TOOL_CALLS.labels("mcp", "error_result" if result.isError else "ok").inc()
        return _result_value(name, result)

    def _lost(self) -> None:
        """A call could not reach the server: drop its tools until the session is back."""
        self.up = False
        if self._wake is not None:
            self.bridge.loop.call_soon_threadsafe(self._wake.set)

    def tools(self, taken: set[str]) -> list[Tool]:
        """This server's tools for one turn (none while it is down), skipping names already taken."""
        if not self.up:
            MCP_UNAVAILABLE.labels(self.label).inc()
            return []
        out = []
        for listed in self.listed:
            if listed.name in taken or not _NAME.match(listed.name):
                continue
            schema = dict(listed.inputSchema or {})
            schema.setdefault("type", "object")
            try:
                tool = Tool(name=listed.name, description=listed.description or listed.name, parameters=schema,
                            handler=_Handler(self, listed.name), timeout=self.call_timeout + 2.0,
                            game=False)  # another party's server: its answers never set the game's facts
            except ToolError as exc:  # a server's odd tool must not fail every turn: leave it out
                log.warning("MCP server %s: tool %r left out: %s", self.label, listed.name, exc)
                continue
            taken.add(listed.name)
            out.append(tool)
        return out


def call_meta() -> dict[str, str]:
    """The call's ids and idempotency key in the request's ``_meta`` (MCP has no header for it): the same key
    an HTTP tool would send, so a server can apply a side effect once across a retried turn."""
    call = current_call()
    return {"parley/conversation_id": call.conversation_id, "parley/input_id": call.input_id,
            "parley/call_id": call.call_id,
            "parley/idempotency_key": idempotency_key(call.conversation_id, call.input_id, call.call_id)}


class _Handler:
    def __init__(self, server: McpServer, name: str) -> None:
        self.server, self.name = server, name

    def __call__(self, **arguments: Any) -> Any:
        return self.server.call(self.name, arguments)


def _result_value(name: str, result: mt.CallToolResult) -> Any:
    """The text parts joined (what the server meant a model to read), else the structured content; an error
    result raises. FastMCP wraps a plain return value as ``{"result": ...}`` in the structured content, which
    would only add noise to the model's context."""
    texts = [c.text for c in result.content if isinstance(c, mt.TextContent)]
    if result.isError:
        raise ToolError(f"MCP tool {name} reported an error: {' '.join(texts) or '(no message)'}")
    if texts or result.structuredContent is None:
        return "\n".join(texts)
    return result.structuredContent


def describe_error(exc: BaseException) -> str:
    """The innermost useful message of an exception group (the SDK's task groups wrap everything), its URLs
    redacted (httpx names the URL it failed on, token and all)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return redact_urls(f"{type(exc).__name__}: {exc}")


class McpSource:
    """All configured servers; :meth:`tools` is the Chat's per-turn ``tool_source``."""

    def __init__(self, servers: Sequence[McpServer], taken: Sequence[str] = ()) -> None:
        self.servers = list(servers)
        self.taken = set(taken)

    def start(self, wait: float) -> None:
        for server in self.servers:
            server.start(wait)

    def tools(self) -> list[Tool]:
        taken = set(self.taken)
        return [tool for server in self.servers for tool in server.tools(taken)]

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
