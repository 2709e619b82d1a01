"""Large signed webhook bodies against the ingress: how long other requests wait and how much memory a body costs,
as ratios against a baseline in the same run.

    python bench/ingress_bodies.py [--url redis://127.0.0.1:6379/0] [--mib 8]

Each case starts a fresh ingress process (uvicorn, one worker, against the Redis at ``--url`` under a random key
prefix, deleted afterwards) and measures:

- the baseline: the latency of a small request (``GET /healthz``, keep-alive) with nothing else going on (p50);
- while one large signed body is POSTed: the same small request's p50 and worst latency, as multiples of the
  baseline p50 (1.0 = the event loop never waited for the body);
- the process's peak memory (VmHWM) growth over the POST, as a multiple of the body's size.

Cases: ``junk`` (``--mib`` of empty entries: what an attacker holding the app secret, or a broken proxy, can send),
``lists`` (the same with empty arrays, which the decoder's object count does not see) and ``batch`` (1000 text messages of non-ASCII text escaped as Meta does, just under ``--mib``: Meta's largest
batch). To compare two versions, run the script of one against the code of the other
(``PYTHONPATH=<old checkout> python bench/ingress_bodies.py``): the figures are ratios, comparable across runs.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import pathlib
import statistics
import subprocess
import sys
import threading
import time
import uuid

import httpx
import redis

SECRET = "bench-secret"


def serve(port: int, url: str, prefix: str) -> None:
    """The ingress process (run as ``--serve``)."""
    import uvicorn

    from worker.client import ConversationClient
    from worker.ingress.app import create_app

    client = ConversationClient.from_url(url, key_prefix=prefix, wake=lambda cid: None)
    app = create_app(client, client.store, app_secret=SECRET, verify_token="v")
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")


def junk_body(size: int) -> bytes:
    return b'{"entry": [' + b",".join([b"{}"] * ((size - 20) // 3)) + b"]}"


def lists_body(size: int) -> bytes:
    return b'{"entry": [' + b",".join([b"[]"] * ((size - 20) // 3)) + b"]}"


def batch_body(size: int) -> bytes:
    now = str(int(time.time()))
    per = (size - 4096) // 1000
    chars = max(1, (per - 260) // 6)  # "é" is sent as \u00e9: 6 bytes
    messages = [{"from": f"4477{i:08d}", "id": f"wamid.bench{i}", "timestamp": now, "type": "text",
                 "text": {"body": "é" * chars}} for i in range(1000)]
    return json.dumps({"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [
        {"field": "messages", "value": {"messaging_product": "whatsapp", "messages": messages}}]}]}).encode()


def peak_rss(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def latencies(http: httpx.Client, base: str, until: threading.Event | None, n: int) -> list[float]:
    out: list[float] = []
    while (until is None and len(out) < n) or (until is not None and not until.is_set()):
        t = time.perf_counter()
        http.get(f"{base}/healthz").raise_for_status()
        out.append(time.perf_counter() - t)
    return out


def run_case(name: str, body: bytes, url: str) -> dict[str, float]:
    port = _free_port()
    prefix = f"bench{uuid.uuid4().hex[:10]}"
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--url", url, "--prefix", prefix],
                            env={**os.environ, "PARLEY_LOG_LEVEL": "ERROR"})
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(timeout=120) as http:
            _wait_up(http, base)
            baseline = statistics.median(latencies(http, base, None, 300))
            before = peak_rss(proc.pid)
            done = threading.Event()
            result: dict[str, float] = {}

            def post() -> None:
                sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
                t = time.perf_counter()
                r = httpx.post(f"{base}/webhook", content=body, headers={"X-Hub-Signature-256": sig}, timeout=300)
                result.update(status=r.status_code, seconds=time.perf_counter() - t)
                done.set()

            threading.Thread(target=post, daemon=True).start()
            during = latencies(http, base, done, 0)
            grown = peak_rss(proc.pid) - before
        return {"baseline_ms": baseline * 1000, "p50_x": statistics.median(during) / baseline,
                "worst_x": max(during) / baseline, "post_s": result["seconds"], "status": result["status"],
                "rss_x": grown / len(body), "rss_mib": grown / 2**20}
    finally:
        proc.terminate()
        proc.wait(30)
        r = redis.Redis.from_url(url)
        for key in r.scan_iter(match=f"{prefix}:*", count=1000):
            r.delete(key)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_up(http: httpx.Client, base: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            if http.get(f"{base}/healthz").status_code == 200:
                return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--mib", type=float, default=8.0, help="size of the large bodies (at most the 8 MiB limit)")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--prefix", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.url, args.prefix)
        return
    size = int(min(args.mib, 8.0) * 2**20) - 64
    import worker.ingress.app as ingress

    print(f"ingress from {pathlib.Path(ingress.__file__).resolve().parent}, bodies of {size / 2**20:.2f} MiB")
    print(f"{'case':<8} {'answer':>6} {'POST s':>8} {'baseline ms':>12} {'p50 x':>8} {'worst x':>9} "
          f"{'worst ms':>9} {'peak RSS growth':>16} {'x body':>7}")
    for name, make in (("junk", junk_body), ("lists", lists_body), ("batch", batch_body)):
        f = run_case(name, make(size), args.url)
        print(f"{name:<8} {f['status']:>6.0f} {f['post_s']:>8.2f} {f['baseline_ms']:>12.2f} {f['p50_x']:>8.1f} "
              f"{f['worst_x']:>9.1f} {f['worst_x'] * f['baseline_ms']:>9.0f} {f['rss_mib']:>12.0f} MiB "
              f"{f['rss_x']:>7.1f}")


if __name__ == "__main__":
    main()
