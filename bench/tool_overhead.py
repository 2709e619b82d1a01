"""What an HTTP tool call costs through Parley, against a raw HTTP POST to the same loopback tool.

    python bench/tool_overhead.py [--calls 2000]

The tool is a loopback HTTP server in its own process (so its work does not share this process's GIL). "Parley"
is the whole path a turn takes for one call: ``run_tool`` (the core's thread with a timeout, the call context)
and the manifest tool's handler (a pooled client lease, the body with the ids, the Idempotency-Key, JSON decode
of the answer). "raw" is ``httpx.Client.post`` with a kept-alive connection and the same body. Medians of one run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from worker.conversation.messages import ToolCall
from worker.conversation.tools import run_tool, turn_context
from worker.tools.http_source import http_tools
from worker.tools.manifest import HttpToolSpec


def _serve(port_out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    from tests.support.game_engine import GameEngine

    engine = GameEngine().start()
    port_out.put(engine.url)
    while True:
        time.sleep(3600)


def _median_us(fn: object, calls: int) -> float:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    q: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    server = multiprocessing.Process(target=_serve, args=(q,), daemon=True)
    server.start()
    url = q.get(timeout=30) + "/look"
    try:
        spec = HttpToolSpec(name="look", description="d", url=url,
                            parameters={"type": "object", "properties": {"player": {"type": "string"}}})
        tools = {t.name: t for t in http_tools([spec], where="bench", default_timeout=10)}
        call = ToolCall(id="call_1", name="look", arguments=json.dumps({"player": "ann"}))
        body = {"conversation_id": "c", "input_id": "i", "call_id": "call_1", "arguments": {"player": "ann"}}
        raw_client = httpx.Client()

        def raw() -> None:
            r = raw_client.post(url, json=body, headers={"Idempotency-Key": "k"})
            r.json()

        def parley() -> None:
            with turn_context("c", "i"):
                m = run_tool(tools, call, default_timeout=10, max_chars=16_000)
            assert not m.is_error, m.content

        for fn in (raw, parley):  # warm-up: connections, imports
            _median_us(fn, 100)
        raw_us = _median_us(raw, args.calls)
        parley_us = _median_us(parley, args.calls)
        print(f"calls per side: {args.calls}")
        print(f"raw httpx POST      median {raw_us:8.1f} us")
        print(f"through Parley      median {parley_us:8.1f} us")
        print(f"overhead            {parley_us - raw_us:8.1f} us   ratio {parley_us / raw_us:.2f}x")
    finally:
        server.terminate()


if __name__ == "__main__":
    main()
