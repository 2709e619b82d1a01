"""Per-call overhead of the providers against loopback servers, against a raw httpx POST to the same server
(the baseline, measured in the same run). With the 'local' extra installed: the local model's load time and
time to answer a short prompt.

    python bench/llm_overhead.py [--calls 2000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.llm.servers import ScriptedServer, anthropic_blocks, openai_text
from worker.conversation import Message, ModelRequest
from worker.llm import build_model, local_model

HISTORY = [Message(role="user" if i % 2 == 0 else "assistant", content=f"message {i} about the treasure hunt")
           for i in range(19)]
REQ = ModelRequest(system="You are a game guide.", messages=HISTORY)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def measure(fn, calls: int) -> list[float]:  # type: ignore[no-untyped-def]
    for _ in range(50):
        fn()
    out = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    print(f"{'what':<28} {'p50 ms':>8} {'p99 ms':>8} {'p50 vs raw':>10}")
    for name, step, build, path in (
        ("openai", openai_text("The clue is under the bench."), lambda url: build_model("openai", model="m", base_url=url + "/v1", api_key="k"), "/v1/chat/completions"),
        ("anthropic", anthropic_blocks({"type": "text", "text": "The clue is under the bench."}), lambda url: build_model("anthropic", model="m", base_url=url, api_key="k"), "/v1/messages"),
    ):
        server = ScriptedServer()
        server.default = step
        model = build(server.url)
        raw_client = httpx.Client(base_url=server.url)
        body = model.body(REQ)  # type: ignore[attr-defined]
        raw = measure(lambda: raw_client.post(path, json=body).json(), args.calls)  # noqa: B023
        full = measure(lambda: model.complete(REQ), args.calls)  # noqa: B023
        print(f"{'raw httpx POST (' + name + ')':<28} {statistics.median(raw) * 1e3:>8.3f} {pct(raw, 0.99) * 1e3:>8.3f} {1.0:>10.2f}")
        print(f"{name + ' provider':<28} {statistics.median(full) * 1e3:>8.3f} {pct(full, 0.99) * 1e3:>8.3f} "
              f"{statistics.median(full) / statistics.median(raw):>10.2f}")
        server.stop()
    if local_model.installed():
        t = time.perf_counter()
        local_model.load()
        load = time.perf_counter() - t
        model = build_model("local", model="SmolLM2-135M-Instruct", max_tokens=60)
        times = []
        for q in ("Say hello.", "What is a treasure hunt?", "Name a famous theatre."):
            t = time.perf_counter()
            r = model.complete(ModelRequest(system="You are a helpful assistant.", messages=[Message(role="user", content=q)]))
            times.append(time.perf_counter() - t)
        print(f"local model: load {load:.2f} s; answer p50 {statistics.median(times):.2f} s "
              f"({r.usage.completion_tokens if r.usage else 0} tokens in the last answer)")
    else:
        print(f"local model: not installed ({local_model.INSTALL_HINT})")


if __name__ == "__main__":
    main()
