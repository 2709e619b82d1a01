"""A game's live context for Parley, both ways (docs/game.md, "Live game context").

Over HTTP: run this file (``python examples/game_context.py 8090``) and name the endpoint in the tool manifest::

    context:
      url: http://127.0.0.1:8090/context
      timeout: 1

In Python: ``PYTHONPATH=examples PARLEY_CONTEXT=game_context:context`` (the worker calls it on each turn).

Either way the text is added to that turn's system prompt and never stored.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Stands in for the game's own state: where each player is, and their current target.
PLAYERS = {"447700900123": {"distance_m": 120, "target": "Harrogate Theatre", "tagged": 3}}


def context(conversation_id: str) -> str | None:
    """The game's words for this player's next turn, or None when there is nothing to say."""
    p = PLAYERS.get(conversation_id)
    if p is None:
        return None
    return (f"Player is {p['distance_m']} m from the target ({p['target']}); "
            f"{p['tagged']} of 5 targets tagged.")


class ContextEndpoint(BaseHTTPRequestHandler):
    """``POST /context`` with ``{"conversation_id", "input_id"}`` -> ``{"system": text or null}``."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        answer = json.dumps({"system": context(body.get("conversation_id", ""))}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 8090), ContextEndpoint).serve_forever()
