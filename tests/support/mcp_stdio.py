"""Stdio MCP servers for the tests: the published reference server ``mcp-server-time`` (a dev dependency), and
``python -m tests.support.mcp_stdio`` (the SDK's FastMCP over stdio), whose ``environment`` tool answers with the
environment it was given, ``pid`` with its process id and ``nap`` sleeps."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.redis_server import skip_or_fail

ROOT = Path(__file__).resolve().parents[2]


def mcp_server_time(*args: str) -> dict[str, Any]:
    """The manifest entry of the published ``mcp-server-time`` (the dev extras install it), run by this
    interpreter so that any virtual environment does: skipped when it is missing, failed in CI."""
    if importlib.util.find_spec("mcp_server_time") is None:
        skip_or_fail("no mcp-server-time (pip install -e '.[dev]')")
    return {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC", *args]}


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
