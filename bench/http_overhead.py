"""CPU a turn's HTTP requests cost the worker: httpx's default transport (httpcore, h11) against the lean
transport (``worker.http.lean_transport``, the standard library's http.client under the same httpx Client), in one
run, alternating, against the loopback peers of ``bench/loopback_peers.py`` in their own process.

    python bench/http_overhead.py [--calls 2000] [--rounds 3] [--gevent]

Each figure is the bench process's own CPU time (``time.process_time``) per request, which the machine's other
load moves far less than wall-clock time: a WhatsApp send through ``WhatsAppSender.send_text`` and a model call
through the OpenAI provider (``complete``, body building and parsing included), as the worker makes them. The
baseline is a bare ``http.client`` POST of the same body over one kept-alive connection. ``--gevent`` patches the
process first, as the gevent pool's worker is.
"""

from __future__ import annotations

import sys

if "--gevent" in sys.argv:
    from gevent import monkey

    monkey.patch_all()

import argparse
import http.client
import json
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from worker.channels.whatsapp import WhatsAppSender
from worker.conversation import Message, ModelRequest
from worker.http import pool as httppool
from worker.llm import build_model

REQ = ModelRequest(system="You are a game guide.", messages=[
    Message(role="user" if i % 2 == 0 else "assistant", content=f"message {i} about the treasure hunt") for i in range(9)])


def cpu_per_call(fn: Callable[[], object], calls: int) -> float:
    for _ in range(50):
        fn()
    c = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - c) / calls


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gevent", action="store_true")
    args = ap.parse_args()
    peers = subprocess.Popen([sys.executable, str(Path(__file__).with_name("loopback_peers.py")), "--delay", "0"],
                             stdout=subprocess.PIPE, text=True)
    assert peers.stdout is not None
    llm_port, wa_port = peers.stdout.readline().split()
    body = json.dumps(WhatsAppSender(phone_number_id="1", access_token="t").body("447700900123", "ack: a reply")).encode()
    raw = http.client.HTTPConnection("127.0.0.1", int(wa_port), timeout=15)

    def bare() -> None:
        raw.request("POST", "/1/messages", body=body, headers={"Content-Type": "application/json"})
        raw.getresponse().read()

    print(f"CPU per request, µs (bench process; {'gevent' if args.gevent else 'no gevent'}; {args.calls} calls a figure)")
    print(f"{'round':<6} {'bare http.client':>17} {'send httpx':>11} {'send lean':>10} {'lean/httpx':>10} "
          f"{'model httpx':>12} {'model lean':>11} {'lean/httpx':>10}")
    ratios: dict[str, list[float]] = {"send": [], "model": []}
    try:
        for r in range(args.rounds):
            row: dict[str, float] = {"bare": cpu_per_call(bare, args.calls)}
            for kind in ("httpx", "lean"):
                httppool.use_lean_transport(kind == "lean")
                sender = WhatsAppSender(phone_number_id="1", access_token="t", base_url=f"http://127.0.0.1:{wa_port}")
                row[f"send {kind}"] = cpu_per_call(lambda: sender.send_text("447700900123", "ack: a reply"), args.calls)  # noqa: B023
                sender.close()
                # A base URL of its own per kind: the provider's client pool is per process and base URL.
                model = build_model("openai", model="m", api_key="k",
                                    base_url=f"http://127.0.0.1:{llm_port}/{'v1' if kind == 'httpx' else 'v2'}")
                row[f"model {kind}"] = cpu_per_call(lambda: model.complete(REQ), args.calls)  # noqa: B023
            ratios["send"].append(row["send lean"] / row["send httpx"])
            ratios["model"].append(row["model lean"] / row["model httpx"])
            print(f"{r + 1:<6} {row['bare'] * 1e6:>17.0f} {row['send httpx'] * 1e6:>11.0f} {row['send lean'] * 1e6:>10.0f} "
                  f"{ratios['send'][-1]:>10.2f} {row['model httpx'] * 1e6:>12.0f} {row['model lean'] * 1e6:>11.0f} "
                  f"{ratios['model'][-1]:>10.2f}")
    finally:
        peers.terminate()
    print(f"median lean/httpx: send {statistics.median(ratios['send']):.2f}, model call {statistics.median(ratios['model']):.2f}")


if __name__ == "__main__":
    main()
