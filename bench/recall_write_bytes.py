"""What the archive adds to a turn's writes to Redis: one conversation through the worker's own path with compaction
on, once with the archive written and once without (the tree as it was before the archive).

    python bench/recall_write_bytes.py [--turns 600]

One conversation of ``--turns`` turns (a player's message, the model's answer; the texts of ``session_peers.py``),
the producer's accept, the drain, the fenced commit, the follow-up compaction and its splice (``compaction_max_tokens``
low, so that compactions come every few dozen turns and drop what the archive then receives), against a real
redis-server with the append-only file on. Printed for each pass: the bytes the client sent
(``total_net_input_bytes``) and the bytes added to the append-only file, per turn (mean and largest), and the ratio
archive / none. The archive's batch and index segment hold only what the commit drops, so a turn's writes stay
O(new): the mean grows by the dropped messages' compressed bytes plus one small index segment per compaction.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis
from session_peers import InstantModel, NullChannel, user_text

from tests.support.redis_server import start_redis
from worker.client import ConversationClient
from worker.runtime import build_service
from worker.service.drain import commit as drain_commit
from worker.settings import Settings
from worker.store.script_args import NO_ARCHIVE

PLAYER = 7


def _counters(r: redis.Redis) -> tuple[int, int]:
    return int(r.info("persistence")["aof_current_size"]), int(r.info("stats")["total_net_input_bytes"])


def one_pass(url: str, turns: int, archive: bool) -> tuple[list[int], list[int], int]:
    settings = Settings(redis_url=url, key_prefix=f"w{uuid.uuid4().hex[:6]}", llm_provider="openai",
                        openai_api_key="k", llm_model="gpt-4o-mini", compaction_summarize=False,
                        compaction_max_tokens=3000, burst_quiet_seconds=0,
                        whatsapp_messages_per_second=0, whatsapp_recipient_per_minute=0)
    woken: list[str] = []

    def wake(kind: str, cid: str, **_: Any) -> None:
        woken.append(kind)

    svc = build_service(settings, wake, model=InstantModel(), channel=NullChannel())
    client = ConversationClient(svc.store, lambda cid: None)
    cid = f"44791{PLAYER:07d}"
    real = drain_commit.archive_of
    if not archive:
        drain_commit.archive_of = lambda *a, **k: (NO_ARCHIVE, [])  # type: ignore[assignment]
    r = redis.Redis.from_url(url)
    sent: list[int] = []
    aof: list[int] = []
    try:
        for t in range(1, turns + 1):
            a0, s0 = _counters(r)
            client.send_message(cid, user_text(PLAYER, t), message_id=f"m{t}")
            svc.drain(cid)
            if "compact" in woken:
                woken.clear()
                if svc.queue_compaction(cid):
                    svc.drain(cid)
            a1, s1 = _counters(r)
            sent.append(s1 - s0)
            aof.append(a1 - a0)
        held = sum(len(b) for b in r.lrange(svc.store.keys(cid).recall, 0, -1))
        held += sum(len(b) for b in r.lrange(svc.store.keys(cid).recall_index, 0, -1))
    finally:
        drain_commit.archive_of = real  # type: ignore[assignment]
        r.close()
    return sent, aof, held


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=600)
    args = parser.parse_args()
    server = start_redis(appendonly=True)
    try:
        url = f"redis://127.0.0.1:{server.port}/0"
        results = {name: one_pass(url, args.turns, name == "archive") for name in ("none", "archive")}
    finally:
        server.stop()
    for name, (sent, aof, held) in results.items():
        print(f"{name:8} sent/turn mean {statistics.mean(sent):8.0f} max {max(sent):7d}   "
              f"aof/turn mean {statistics.mean(aof):8.0f} max {max(aof):7d}   archive held {held} bytes")
    (s0, a0, _), (s1, a1, _) = results["none"], results["archive"]
    print(f"ratio archive/none: sent {statistics.mean(s1) / statistics.mean(s0):.3f}  "
          f"aof {statistics.mean(a1) / statistics.mean(a0):.3f}")


if __name__ == "__main__":
    main()
