"""The drain's own cost per turn, this tree against another (e.g. the commit before a change of the drain), in one
run.

    git worktree add --detach /tmp/old <old-commit>
    python bench/drain_cost.py --old /tmp/old [--n 2000] [--rounds 6]

Each round runs, for each tree in turn (the order alternates), a child process with that tree first on its path,
against one redis-server of its own: a service with an instant scripted model and a recording channel (no HTTP, so
what is left is the drain's Python, the store's round trips and the inline delivery), 300 warm-up turns, then
``--n`` turns on 50 conversations, each an accepted message (as varied as players' messages: bench/player_texts.py,
the same ones for both trees) and ``service.drain``. Measured per turn around the
drain: CPU (``time.process_time``) and wall time; then 200 more drains under cProfile, for the Python function
calls per drain (a count the load of a shared machine does not move, unlike the times). Two configurations: ``plain`` (the defaults: one turn per
message, no budget, no record, no bound, presence off) and ``features`` (double-text merging, a daily budget, the
durable record, a fairness bound, presence on, its posts to the recording channel made at once). Prints the median over the rounds for each
tree and the ratio new / old.
"""

from __future__ import annotations

import cProfile
import json
import pstats
import statistics
import sys
import time
import uuid
from typing import Any

from player_texts import player_message
from two_trees import options, run_alternating


def child(port: int, n: int, features: bool) -> dict[str, float]:
    import redis

    from worker import Chat, ScriptedModel
    from worker.client import ConversationClient
    from worker.service import ConversationService, Presence, ServiceConfig
    from worker.settings import Budget, Burst, Delivery, Drain
    from worker.store.redis_store import ConversationStore
    from worker.testing import RecordingChannel

    store = ConversationStore(redis.Redis(port=port), prefix=f"b{uuid.uuid4().hex[:6]}")
    chat = Chat(model=ScriptedModel(default=lambda req: "ack"), auto_compact=False)
    channel = RecordingChannel()
    bare = {"drain": Drain(max_turns=0, max_seconds=0.0, dead_letter_reply=""),
            "delivery": Delivery(status_webhooks=False), "budget": Budget(token_budget_reply="")}
    config = ServiceConfig(system_prompt="You are a test.", burst=Burst(quiet_seconds=0.0), **bare)
    presence = None
    if features:
        config = ServiceConfig(system_prompt="You are a test.", burst=Burst(quiet_seconds=0.0, double_text="merge"),
                               drain=Drain(max_turns=1000, max_seconds=0.0, dead_letter_reply=""),
                               delivery=Delivery(status_webhooks=False),
                               budget=Budget(daily_token_budget=10**9, token_budget_reply="over"), record=True)
        presence = Presence(channel, enabled=True, spawn=lambda post: post(), autostart=False)
    service = ConversationService(store, chat, channel, lambda *a, **k: None, config, presence=presence)
    client = ConversationClient(store, lambda cid: None)
    cpu: list[float] = []
    wall: list[float] = []
    profile = cProfile.Profile()
    for i in range(300 + n + 200):
        cid = f"4477{i % 50:06d}"
        client.send_message(cid, player_message(i), message_id=f"wamid.q{i}")
        if i >= 300 + n:  # the last 200 counted in Python calls (no timing: the profiler slows them)
            profile.runcall(service.drain, cid)
            continue
        c0, w0 = time.process_time(), time.perf_counter()
        service.drain(cid)
        if i >= 300:
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
        if len(channel.sent) > 1000:
            channel.sent.clear()
            channel.read.clear()
    calls = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]
    return {"cpu_us": sum(cpu) / n * 1e6, "wall_us": statistics.median(wall) * 1e6, "calls": calls / 200}


def main() -> None:
    runs = run_alternating(__file__, options(), (("plain",), ("features",)))
    results = {(variant[0], label): figures for (variant, label), figures in runs.items()}
    med: dict[tuple[str, str], dict[str, Any]] = {
        key: {k: statistics.median(run[k] for run in runs) for k in runs[0]} for key, runs in results.items()}
    for config in ("plain", "features"):
        old, new = med[(config, "old")], med[(config, "new")]
        print(f"{config:9s} CPU per drain: old {old['cpu_us']:.0f} µs, new {new['cpu_us']:.0f} µs "
              f"({new['cpu_us'] / old['cpu_us']:.2f}x); wall p50: old {old['wall_us']:.0f} µs, "
              f"new {new['wall_us']:.0f} µs ({new['wall_us'] / old['wall_us']:.2f}x); Python calls per drain: "
              f"old {old['calls']:.0f}, new {new['calls']:.0f} ({new['calls'] / old['calls']:.3f}x)")
        for label in ("old", "new"):
            print(f"  {label} rounds:", [{k: round(v) for k, v in run.items()} for run in results[(config, label)]])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(child(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "features")))
    else:
        main()
