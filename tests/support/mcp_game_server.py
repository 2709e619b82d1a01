"""An MCP server (the official SDK's FastMCP, streamable HTTP) for the tests: ``python -m
tests.support.mcp_game_server PORT``. ``weather`` answers; ``unlock`` adds the ``secret_door`` tool and tells
the client its tool list changed; ``nap`` sleeps (for timeouts); ``whoami`` echoes
the request's ``_meta``; ``bearer`` the HTTP request's Authorization header."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time

from mcp.server.fastmcp import Context, FastMCP


def build(port: int) -> FastMCP:
    server = FastMCP("game-mcp", host="127.0.0.1", port=port, log_level="WARNING")

    @server.tool()
    def weather(city: str) -> str:
        """The weather in a city of the game world."""
        return f"storm over {city}"

    def secret_door() -> str:
        """Opens the secret door."""
        return "the door creaks open"

    @server.tool()
    async def unlock(ctx: Context) -> str:  # type: ignore[type-arg]
        """Unlocks a new tool."""
        server.add_tool(secret_door)
        await ctx.session.send_tool_list_changed()
        return "unlocked"

    @server.tool()
    def whoami(ctx: Context) -> str:  # type: ignore[type-arg]
        """The request's _meta, as JSON."""
        meta = ctx.request_context.meta
        return json.dumps(meta.model_dump(exclude_none=True) if meta is not None else {}, sort_keys=True)

    @server.tool()
    def bearer(ctx: Context) -> str:  # type: ignore[type-arg]
        """The HTTP request's Authorization header (empty when it had none)."""
        request = ctx.request_context.request
        return str(request.headers.get("authorization", "")) if request is not None else ""

    @server.tool()
    async def nap(seconds: float) -> str:
        """Sleeps."""
        await asyncio.sleep(seconds)
        return "rested"

    return server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class McpProcess:
    """The server in a subprocess on a free loopback port (a subprocess, so a test can kill it)."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self, wait: float = 20.0) -> McpProcess:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.mcp_game_server", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError("the MCP server exited at start") from None
                time.sleep(0.05)
        raise RuntimeError("the MCP server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


if __name__ == "__main__":
    build(int(sys.argv[1])).run(transport="streamable-http")
