"""The tools a deployment gives the model, from settings alone (docs/tools.md).

An edge package, not part of the pure core: it imports the game's Python tools, reads the HTTP manifest and keeps
MCP sessions open. :func:`load_tools` runs once per worker process when the service is built; everything wrong with
the configuration fails there, as a :class:`~worker.errors.ConfigurationError`.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from worker.conversation.tools import Tool, check_tools
from worker.errors import ConfigurationError, ToolError
from worker.http.urls import redact_url
from worker.settings.business_numbers import Numbers
from worker.tools.http_source import http_tools, idempotency_key
from worker.tools.manifest import McpServerSpec, McpSpec, McpStdioSpec, expand_env, expand_headers, load_manifest
from worker.tools.python_source import load_entry_points, load_reference

if TYPE_CHECKING:  # the MCP SDK takes about half a second to import: only deployments with MCP servers pay it
    from worker.tools.mcp_source import McpSource

__all__ = ["LoadedTools", "fixed_tools", "idempotency_key", "load_tools", "number_tools", "stop_mcp_processes"]

# How long the worker's start waits for each MCP server's first tool listing.
MCP_START_WAIT = 10.0


@dataclass
class LoadedTools:
    """``fixed``: tools whose set never changes; ``mcp``: the per-turn source of the MCP servers' tools."""

    fixed: list[Tool] = field(default_factory=list)
    mcp: McpSource | None = None

    def close(self) -> None:
        if self.mcp is not None:
            self.mcp.stop()


def fixed_tools(settings: Any) -> tuple[list[Tool], list[McpSpec]]:
    """The tools whose set never changes (Python, then the manifest's HTTP tools) and the MCP servers to open;
    no connection is made, so the worker's main process can check the configuration before it forks."""
    fixed: list[Tool] = []
    if settings.tooling.tools:
        fixed.extend(load_reference(settings.tooling.tools, settings))
    fixed.extend(load_entry_points(settings))
    servers: list[McpSpec] = []
    if settings.tooling.tools_file:
        manifest = load_manifest(settings.tooling.tools_file)
        fixed.extend(http_tools(manifest.tools, where=f"PARLEY_TOOLS_FILE {settings.tooling.tools_file}",
                                default_timeout=settings.tooling.tool_timeout))
        servers.extend(manifest.mcp_servers)
    servers.extend(_env_servers(settings))
    for s in servers:
        if isinstance(s, McpStdioSpec):
            _check_command(s)
        else:
            expand_headers(s.headers, f"mcp_servers ({redact_url(s.url)})")
    try:
        check_tools(fixed)
    except ToolError as exc:
        raise ConfigurationError(f"tools: {exc}") from exc
    return fixed, servers


def number_tools(numbers: Numbers, settings: Any) -> dict[str, tuple[Tool, ...]]:
    """Each business number's own HTTP tools (its ``tools_file`` in ``PARLEY_WHATSAPP_NUMBERS_FILE``), by phone
    number id: offered beside the deployment's in that number's turns (see :mod:`worker.service.number_turns`)."""
    out: dict[str, tuple[Tool, ...]] = {}
    for n in numbers.all:
        if n.tools_file is None:
            continue
        where = f"the tools_file of number {n.phone_number_id} ({n.tools_file})"
        tools = http_tools(load_manifest(n.tools_file).tools, where=where,
                           default_timeout=settings.tooling.tool_timeout)
        try:
            check_tools(tools)
        except ToolError as exc:
            raise ConfigurationError(f"{where}: {exc}") from exc
        out[n.phone_number_id] = tuple(tools)
    return out


def _check_command(spec: McpStdioSpec) -> None:
    """A stdio server's ``env`` expands and its command can be found (on the ``PATH`` it will be given), so a typo
    stops the worker at start instead of leaving every turn without the server's tools."""
    env = expand_env(spec)
    if shutil.which(spec.command, path=env.get("PATH", os.environ.get("PATH"))) is None:
        raise ConfigurationError(f"mcp_servers (command {spec.command!r}): no such executable "
                                 f"(not a file that can be run, nor found on PATH)")


def stop_mcp_processes() -> None:
    """End the stdio MCP servers this process started (worker shutdown); nothing when it started none."""
    stdio = sys.modules.get("worker.tools.mcp_stdio")
    if stdio is not None:
        stdio.stop_all()


def _env_servers(settings: Any) -> list[McpServerSpec]:
    """The servers of ``PARLEY_MCP_SERVERS``, each with its headers from ``PARLEY_MCP_HEADERS`` (keyed by the URL as
    written there). Headers for a server that is not in the list are refused: a mistyped key would otherwise send
    no credentials and fail every call."""
    urls = [u.strip() for u in (settings.tooling.mcp_servers or "").split(",") if u.strip()]
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"PARLEY_MCP_SERVERS: {redact_url(url)!r} is not an http(s) URL")
    headers = settings.tooling.mcp_headers or {}
    unknown = sorted(redact_url(u) for u in headers if u not in urls)
    if unknown:
        raise ConfigurationError(f"PARLEY_MCP_HEADERS: {', '.join(unknown)} is not one of PARLEY_MCP_SERVERS")
    return [McpServerSpec(url=url, headers=headers.get(url, {})) for url in urls]


def load_tools(settings: Any, *, mcp_start_wait: float = MCP_START_WAIT) -> LoadedTools:
    """:func:`fixed_tools`, and the MCP servers' sessions opened on this process's event-loop thread (waiting up
    to ``mcp_start_wait`` s for each first listing). An MCP tool whose name is taken is left out."""
    fixed, servers = fixed_tools(settings)
    if not servers:
        return LoadedTools(fixed)
    from mcp import StdioServerParameters

    from worker.tools.mcp_source import EventLoopThread, McpServer, McpSource
    from worker.tools.mcp_stdio import McpStdioServer

    bridge = EventLoopThread()
    timing = {"call_timeout": settings.tooling.tool_timeout, "refresh_seconds": settings.tooling.mcp_refresh_seconds}
    opened: list[McpServer] = []
    for s in servers:
        if isinstance(s, McpStdioSpec):  # started by the first turn of each process that uses it
            params = StdioServerParameters(command=s.command, args=s.args, env=expand_env(s))
            opened.append(McpStdioServer(params, bridge=bridge, start_wait=mcp_start_wait, **timing))
        else:
            headers = expand_headers(s.headers, f"mcp_servers ({redact_url(s.url)})")
            opened.append(McpServer(s.url, headers=headers, bridge=bridge, **timing))
    source = McpSource(opened, taken=[t.name for t in fixed])
    source.start(mcp_start_wait)
    return LoadedTools(fixed, source)
