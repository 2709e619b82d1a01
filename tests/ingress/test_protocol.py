"""TCP_NODELAY on the webhook's connections (worker/ingress/protocol.py): uvicorn's supervisor (``--workers`` above
1) binds a listener with ``proto`` 0, so asyncio leaves Nagle's algorithm on for what it accepts and each keep-alive
answer waited ~44 ms for the client's delayed ACK."""

from __future__ import annotations

import asyncio
import pathlib
import socket

import yaml
from uvicorn.config import Config
from uvicorn.protocols.http.auto import AutoHTTPProtocol
from uvicorn.server import ServerState

from worker.ingress.protocol import NoDelayHTTP

ROOT = pathlib.Path(__file__).resolve().parents[2]
OPTION = "worker.ingress.protocol:NoDelayHTTP"


async def _app(scope: object, receive: object, send: object) -> None:  # never reached: no request is sent
    raise AssertionError


def _nodelay_of_accepted(protocol: type[asyncio.Protocol]) -> int:
    """TCP_NODELAY on the server side of one connection accepted through a listener bound as uvicorn's supervisor
    binds it (``socket.socket(family)``: ``proto`` 0)."""
    config = Config(_app, lifespan="off")
    config.load()
    made: list[asyncio.Protocol] = []

    async def run() -> int:
        listener = socket.socket(socket.AF_INET)
        listener.bind(("127.0.0.1", 0))
        assert listener.proto == 0

        def factory() -> asyncio.Protocol:
            made.append(protocol(config=config, server_state=ServerState(), app_state={}))  # type: ignore[call-arg]
            return made[-1]

        server = await asyncio.get_running_loop().create_server(factory, sock=listener)
        try:
            _, writer = await asyncio.open_connection(*listener.getsockname())
            for _ in range(200):
                if made and getattr(made[0], "transport", None) is not None:
                    break
                await asyncio.sleep(0.01)
            sock = made[0].transport.get_extra_info("socket")  # type: ignore[attr-defined]
            value = int(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()
            return value
        finally:
            server.close()

    return asyncio.run(run())


def test_the_webhooks_protocol_turns_nagle_off_where_uvicorns_own_leaves_it_on() -> None:
    assert _nodelay_of_accepted(NoDelayHTTP) != 0
    # If this starts failing, uvicorn sets the option itself now (its issue 3149) and protocol.py may go.
    assert _nodelay_of_accepted(AutoHTTPProtocol) == 0


def test_the_procfile_and_compose_run_the_webhook_with_it() -> None:
    line = next(ln for ln in (ROOT / "Procfile").read_text().splitlines() if ln.startswith("webhook:"))
    assert f"--http {OPTION}" in line
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    commands = [svc.get("command") or [] for svc in compose["services"].values()]
    webhook = next(c for c in commands if "worker.ingress.app:app" in c)
    assert webhook[webhook.index("--http") + 1] == OPTION
