"""One commit's cost, this tree against another (e.g. the commit before a change of the scripts), in one run.

    git archive <old-commit> worker | tar -x -C /tmp/old
    python bench/lua_commit_cost.py --old /tmp/old [--n 2000] [--rounds 6]

Each round runs, for each tree in turn (the order alternates), a child process with that tree first on its path,
against one redis-server of its own (tests/support/redis_server.py): 300 warm-up turns, then ``--n`` turns
(accept, begin, commit of a 600-byte state, a reply and a trace entry) on 50 conversations. Measured per commit:

- server: the EVALSHA's duration in SLOWLOG (threshold 0). Redis also logs the commands the script calls, which adds
  the same to both trees (they make the same calls): compare, do not read as absolute.
- client CPU and wall: ``time.process_time`` / ``perf_counter`` around ``store.commit`` (the wire included).
- wrapper: ``Scripts.commit`` alone with the script call stubbed (its Python cost: arguments in, reply parsed),
  best of 7 x 200,000 calls in process time.

Prints the median over the rounds for each tree, then each round's figures.
"""

from __future__ import annotations

import inspect
import json
import statistics
import sys
import time
import timeit
import uuid
from typing import Any

from two_trees import options, run_alternating


def wire(port: int, n: int) -> dict[str, float]:
    import redis

    from worker.store.redis_store import ConversationStore

    client = redis.Redis(port=port)
    prefix = f"b{uuid.uuid4().hex[:6]}"
    store = ConversationStore(client, prefix=prefix)
    sha = store._scripts._commit.sha
    totals = {"cpu": 0.0, "wall": 0.0}

    def turn(i: int, measure: bool) -> None:
        cid = f"4477{i % 50:06d}"
        store.accept(cid, b"payload " * 8, f"m{i}")
        b = store.begin(cid, 5_000)
        assert b.snapshot is not None
        c0, w0 = time.process_time(), time.perf_counter()
        store.commit(cid, b.token, expected_version=b.snapshot.version, input_id=f"m{i}", new_state=b"s" * 600,
                     reply=b"reply " * 20, trace=b"t" * 100)
        if measure:
            totals["cpu"] += time.process_time() - c0
            totals["wall"] += time.perf_counter() - w0

    for i in range(300):
        turn(i, False)
    room = 60 * n + 1000  # the commands the scripts call are logged too
    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", room)
    client.slowlog_reset()
    for i in range(300, 300 + n):
        turn(i, True)
    log = client.slowlog_get(room)
    client.config_set("slowlog-log-slower-than", 10_000)
    server = [e["duration"] for e in log if e["command"].split()[:2] == [b"EVALSHA", sha.encode()]]
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        client.delete(key)
    return {"server_us": statistics.median(server), "client_cpu_us": totals["cpu"] / n * 1e6,
            "client_wall_us": totals["wall"] / n * 1e6, "wrapper_us": wrapper()}


def wrapper() -> float:
    import fakeredis

    from worker.store.redis_store import ConversationStore
    from worker.store.script_args import RecordArgs

    store = ConversationStore(fakeredis.FakeRedis(), prefix="w")
    scripts: Any = store._scripts
    canned = [3, 0, 1, False, 0, False, 0, False, 0, 0, [], b"t:3", False]
    scripts._commit = lambda keys, args: canned
    conversation: dict[str, Any] = {}
    # The wrapper's keyword for the conversation's keys: ``keys`` now, ``k`` in trees before the store's names.
    keyword = "keys" if "keys" in inspect.signature(scripts.commit).parameters else "k"
    conversation[keyword] = store.keys("447700900001")
    record = RecordArgs("stream", "dropped", 0, b"")

    def one() -> None:
        scripts.commit(**conversation, token=5, expected_version=2, input_id="m1", mode="set", blob=b"s", reply_entry=b"r",
                       trace_entry=b"", dead_entry=b"", lease_ms=5000, trace_max=10, dead_max=10, ttl_ms=0,
                       claim_ms=0, record=record, peek=0)

    n = 200_000
    return min(timeit.repeat(one, number=n, repeat=7, timer=time.process_time)) / n * 1e6


def main() -> None:
    runs = run_alternating(__file__, options())
    results = {label: figures for (_, label), figures in runs.items()}
    for label, runs in results.items():
        medians = {k: round(statistics.median(run[k] for run in runs), 1) for k in runs[0]}
        print(label, medians, "rounds:", [{k: round(v, 1) for k, v in run.items()} for run in runs])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(wire(int(sys.argv[2]), int(sys.argv[3]))))
    else:
        main()
