"""End to end with the game's tools: a real Celery worker given all three tool sources from settings alone --
a Python tool package (entry point and PARLEY_TOOLS), HTTP tools of a loopback game engine from a manifest, and
an MCP server (the SDK's FastMCP) -- and a loopback model that calls them and answers with their results."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Cluster
from tests.support.game_engine import GameEngine
from tests.support.mcp_game_server import McpProcess
from tests.support.workers import wait_until
from worker.tools import idempotency_key

pytestmark = pytest.mark.e2e

PACKAGE = """
from worker.conversation import Tool, current_call


def inventory(player):
    return {"items": ["rope", "lantern"], "player": player, "conversation": current_call().conversation_id}


def factory(settings):
    return [Tool(name="inventory", description="A player's items.",
                 parameters={"type": "object", "properties": {"player": {"type": "string"}}}, handler=inventory)]


EXTRA = [Tool(name="dice", description="Rolls a die.", parameters={"type": "object"}, handler=lambda: "rolled 6")]
"""


@pytest.fixture()
def game(tmp_path: Path) -> Iterator[tuple[GameEngine, McpProcess, Path]]:
    (tmp_path / "pkgs" / "e2e_game_tools").mkdir(parents=True)
    (tmp_path / "pkgs" / "e2e_game_tools" / "__init__.py").write_text(textwrap.dedent(PACKAGE))
    dist = tmp_path / "pkgs" / "e2e_game_tools-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: e2e-game-tools\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[parley.tools]\ngame = e2e_game_tools:factory\n")
    engine = GameEngine().start()
    mcp = McpProcess().start()
    manifest = {
        "tools": [{"name": n, "description": f"{n} in the game", "url": f"{engine.url}/{n}",
                   "parameters": {"type": "object", "properties": {"player": {"type": "string"},
                                                                   "item": {"type": "string"}}},
                   "headers": {"Authorization": "Bearer ${GAME_TOKEN}"}} for n in ("look", "give")],
        "mcp_servers": [{"url": mcp.url}],
    }
    (tmp_path / "tools.json").write_text(json.dumps(manifest))
    yield engine, mcp, tmp_path
    mcp.stop()
    engine.stop()


@pytest.mark.parametrize("pool", ["threads", "gevent"])
def test_a_worker_offers_and_calls_all_three_tool_sources(cluster: Cluster, game: tuple[GameEngine, McpProcess, Path],
                                                          pool: str) -> None:
    engine, _, tmp = game
    cluster.env.update({"PARLEY_TOOLS_FILE": str(tmp / "tools.json"), "PARLEY_TOOLS": "e2e_game_tools:EXTRA",
                        "GAME_TOKEN": "tok", "PYTHONPATH": f"{cluster.env['PYTHONPATH']}:{tmp / 'pkgs'}"})
    cluster.llm.plan_tools = lambda body: [("inventory", {"player": "ann"}), ("dice", {}),
                                           ("look", {"player": "ann"}), ("give", {"player": "ann", "item": "sword"}),
                                           ("weather", {"city": "Oslo"})]
    cluster.start_worker("w1", pool=pool)
    client = cluster.client()
    cids = [f"4477001{i:05d}" for i in range(3)]
    for cid in cids:
        client.send_message(cid, f"{cid} what now?", message_id=f"{cid}-m1")
    assert wait_until(lambda: len(cluster.whatsapp.sent) >= len(cids), 60), [w.log() for w in cluster.workers]
    for cid in cids:
        [reply] = cluster.whatsapp.texts_for(cid)
        assert reply.startswith(f"ack:{cid} what now? | ")
        for piece in ('"rope"', f'"conversation": "{cid}"', "rolled 6", "the Rusty Anchor tavern",
                      '"granted": "sword"', "storm over Oslo"):
            assert piece in reply, (piece, reply)
    # the game engine saw each call once, with the conversation, the input and a key derived from the call
    gives = [(h, b) for p, h, b in engine.calls if p == "/give"]
    assert sorted(b["conversation_id"] for _, b in gives) == sorted(cids)
    for headers, body in gives:
        assert body["input_id"] == f"{body['conversation_id']}-m1"
        assert headers["authorization"] == "Bearer tok"
        assert headers["idempotency-key"] == idempotency_key(body["conversation_id"], body["input_id"],
                                                             body["call_id"])
    assert all(n == 1 for n in engine.keys.values()), engine.keys
    offered = {t["function"]["name"] for t in cluster.llm.requests[0]["tools"]}
    reply_tools = {"send_image", "send_location", "request_location", "send_buttons", "send_list", "react"}  # WhatsApp's
    assert offered == {"inventory", "dice", "look", "give", "weather", "unlock", "nap", "whoami", "bearer", *reply_tools,
                       "search_conversation"}  # recall's tool, offered by default with a provider that calls tools


def test_a_bad_manifest_stops_the_worker_at_start(cluster: Cluster, tmp_path: Path) -> None:
    bad = tmp_path / "tools.yaml"
    bad.write_text("tools:\n  - name: look\n    description: d\n    parameters: {type: object}\n")
    cluster.env["PARLEY_TOOLS_FILE"] = str(bad)
    w = cluster.start_worker("w1")
    assert wait_until(lambda: not w.alive(), 30), w.log()
    assert f"PARLEY_TOOLS_FILE {bad}: tools.0.url: Field required" in w.log()
