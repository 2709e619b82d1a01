"""Light loopback stand-ins for the LLM provider and the WhatsApp Cloud API, in a process of their own.

    python bench/loopback_peers.py --delay 2.0      # prints "<llm port> <whatsapp port>" and serves until killed

The test suites use the thread-per-request servers in ``tests/support`` (rich fault injection, request
capture). For load benchmarks those cost more CPU per request than the worker under test and share its two
cores, so the figures would mostly measure them. These answer from one asyncio loop with hand-written HTTP/1.1
(keep-alive, Content-Length bodies only): an OpenAI Chat Completions answer ``ack:<last user text>`` after
``--delay`` seconds, and a WhatsApp ``/messages`` answer with a fresh wamid. ``GET /stats`` on either port
returns JSON: requests, sends, in flight now and at most, and when the last send arrived.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from itertools import count

STATS: dict[str, float] = {"llm_requests": 0, "sends": 0, "in_flight": 0, "max_in_flight": 0, "last_send_at": 0.0}
_ids = count(1)


def _response(status: int, body: bytes) -> bytes:
    return (f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: keep-alive\r\n\r\n").encode() + body


def _completion(req: bytes) -> bytes:
    messages = json.loads(req).get("messages", [])
    last = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), "") or ""
    if isinstance(last, list):
        last = " ".join(str(p.get("text", "")) for p in last if isinstance(p, dict))
    n = next(_ids)
    return json.dumps({
        "id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0, "model": "bench",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": f"ack:{last}"}}],
        "usage": {"prompt_tokens": len(req) // 4, "completion_tokens": 4, "total_tokens": len(req) // 4 + 4},
    }).encode()


class Peer(asyncio.Protocol):
    def __init__(self, kind: str, delay: float) -> None:
        self.kind, self.delay = kind, delay
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4:end + 4 + length]
            self.buf = self.buf[end + 4 + length:]
            self.handle(head.split(" ", 2)[:2], body)

    def handle(self, start: list[str], body: bytes) -> None:
        assert self.transport is not None
        method, path = start[0], start[1] if len(start) > 1 else "/"
        if method == "GET" and path.startswith("/stats"):
            self.transport.write(_response(200, json.dumps(STATS).encode()))
        elif self.kind == "llm":
            STATS["llm_requests"] += 1
            STATS["in_flight"] += 1
            STATS["max_in_flight"] = max(STATS["max_in_flight"], STATS["in_flight"])
            answer = _response(200, _completion(body))
            asyncio.get_running_loop().call_later(self.delay, self._finish, answer)
        else:
            STATS["sends"] += 1
            STATS["last_send_at"] = time.time()
            wamid = f"wamid.bench{next(_ids)}"
            self.transport.write(_response(200, json.dumps({
                "messaging_product": "whatsapp", "contacts": [{"input": "x", "wa_id": "x"}],
                "messages": [{"id": wamid}]}).encode()))

    def _finish(self, answer: bytes) -> None:
        STATS["in_flight"] -= 1
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(answer)


async def serve(delay: float) -> None:
    loop = asyncio.get_running_loop()
    llm = await loop.create_server(lambda: Peer("llm", delay), "127.0.0.1", 0, backlog=4096)
    wa = await loop.create_server(lambda: Peer("whatsapp", 0.0), "127.0.0.1", 0, backlog=4096)
    print(llm.sockets[0].getsockname()[1], wa.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--delay", type=float, default=0.0, help="seconds before the model answers")
    args = ap.parse_args()
    try:
        asyncio.run(serve(args.delay))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
