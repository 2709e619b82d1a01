"""Stdio MCP servers for the tests: the published reference server ``mcp-server-time`` (in a virtual environment of
its own, made by scripts/install-mcp-servers: it needs the SDK 2.x, Parley's client is on 1.x), and
``python -m tests.support.mcp_stdio`` (the SDK's FastMCP over stdio), whose ``environment`` tool answers with the
environment it was given, ``pid`` with its process id and ``nap`` sleeps."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from tests.support.redis_server import in_ci, skip_or_fail

ROOT = Path(__file__).resolve().parents[2]


def mcp_server_time() -> str:
    """The path of ``mcp-server-time``: installed by scripts/install-mcp-servers in CI when missing; skipped
    elsewhere, failed in CI when it cannot be had."""
    found = Path(os.environ.get("PARLEY_MCP_SERVERS_VENV", ROOT / ".venv-mcp-servers")) / "bin" / "mcp-server-time"
    if not found.exists() and in_ci():
        subprocess.run([str(ROOT / "scripts" / "install-mcp-servers")], check=True, timeout=900)
    if not found.exists():
        skip_or_fail("no mcp-server-time (scripts/install-mcp-servers installs it)")
    return str(found)


def main() -> None:
    from mcp.server.fastmcp import FastMCP

    server = FastMCP("stdio-test", log_level="WARNING")

    @server.tool()
    def environment() -> str:
        """The server's environment, as JSON."""
        return json.dumps(dict(os.environ))

    @server.tool()
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool()
    def nap(seconds: float) -> str:
        """Sleeps (a call in flight when the server is killed)."""
        time.sleep(seconds)
        return "rested"

    server.run("stdio")


if __name__ == "__main__":
    main()
