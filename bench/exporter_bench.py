"""The durable record's exporter against the worker at full speed, in one run.

    python bench/exporter_bench.py [--conversations 100] [--turns 20] [--rounds 3]

Against a real redis-server started on a free port and a fresh database on the machine's PostgreSQL:

- **worker**: the producer's accept, the drain (one chat turn with an in-process model that answers at once) and
  the inline delivery to a channel that sends nowhere, with the record on: each turn appends two entries (the
  turn, the sent reply). Celery is left out, so this is faster than a real worker: the comparison is strict.
  Printed: turns/s and record entries/s; the same turns with the record off give what the record costs a turn.
- **exporter**: `Exporter.export_once` passes over what the worker appended, until the streams are empty: entries
  written to PostgreSQL (records, messages, usage, conversations) and trimmed from the stream, per second.
- **together**: the worker again while a real `parley exporter` process runs beside it (two processes on this
  2-core machine): the backlog left when the worker stops, and how long the exporter then needs to drain it.

The target (issue 18): exporter entries/s at least 1.5x the worker's entries/s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from session_peers import InstantModel, NullChannel, user_text  # noqa: E402

from tests.support.postgres import fresh_database  # noqa: E402
from tests.support.redis_server import start_redis  # noqa: E402
from worker.client import ConversationClient  # noqa: E402
from worker.durable_record import database  # noqa: E402
from worker.durable_record.exporter import Exporter  # noqa: E402
from worker.runtime import build_service  # noqa: E402
from worker.settings import Settings  # noqa: E402


def _settings(url: str, prefix: str, db_url: str | None) -> Settings:
    return Settings(redis_url=url, key_prefix=prefix, llm_provider="openai", openai_api_key="k",
                    llm_model="gpt-4o-mini", compaction_summarize=False, compaction_max_tokens=10_000_000,
                    burst_quiet_seconds=0, whatsapp_messages_per_second=0, whatsapp_recipient_per_minute=0,
                    database_url=db_url, record_stream_max=10_000_000)


def worker(url: str, prefix: str, db_url: str | None, conversations: int, turns: int) -> tuple[float, Any]:
    """Seconds to apply and deliver ``conversations x turns`` turns, and the service."""
    def wake(*_: Any, **__: Any) -> None:
        return None

    svc = build_service(_settings(url, prefix, db_url), wake, model=InstantModel(), channel=NullChannel())
    client = ConversationClient(svc.store, wake)
    ids = [f"44791{c:07d}" for c in range(conversations)]
    started = time.perf_counter()
    for t in range(turns):
        for c, cid in enumerate(ids):
            client.send_message(cid, user_text(c, t), message_id=f"m{c}-{t}")
            if svc.drain(cid) != 1:
                raise RuntimeError(f"turn {t} of {cid} was not applied")
    return time.perf_counter() - started, svc


def export_all(store: Any, db_url: str, batch: int) -> tuple[float, int]:
    exporter = Exporter(store, lambda: database.connect(db_url), batch=batch)
    exporter._db()  # connect and check the schema outside the timing
    started = time.perf_counter()
    total = exporter.export_all()
    elapsed = time.perf_counter() - started
    exporter.close()
    return elapsed, total


def together(url: str, db_url: str, conversations: int, turns: int, batch: int) -> dict[str, float]:
    prefix = f"x{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "REDIS_URL": url, "PARLEY_KEY_PREFIX": prefix, "PARLEY_DATABASE_URL": db_url,
           "PARLEY_EXPORTER_BATCH": str(batch), "PARLEY_EXPORTER_IDLE_SECONDS": "0.05", "PARLEY_LOG_LEVEL": "WARNING"}
    proc = subprocess.Popen([sys.executable, "-m", "worker.cli", "exporter"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        proc.stderr.readline()  # "exporter running": started, before the worker is
        time.sleep(0.5)  # its first pass (connect, schema check) is behind it
        elapsed, svc = worker(url, prefix, db_url, conversations, turns)
        left = svc.store.record_backlog()
        started = time.perf_counter()
        while svc.store.record_backlog().entries:
            time.sleep(0.01)
        drain = time.perf_counter() - started
    finally:
        proc.terminate()
        proc.wait(30)
    return {"turns_per_s": conversations * turns / elapsed, "backlog_at_end": left.entries,
            "lag_at_end_s": left.oldest_age_s, "drained_after_s": drain}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--conversations", type=int, default=100)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=500)
    a = ap.parse_args()
    server = start_redis()
    url = f"redis://127.0.0.1:{server.port}/0"
    n = a.conversations * a.turns
    rows: dict[str, list[float]] = {"worker_on": [], "worker_off": [], "entries_per_s": [], "exported_per_s": [],
                                    "ratio": []}
    try:
        with fresh_database() as db_url:
            conn = database.connect(db_url)
            database.upgrade(conn)
            conn.close()
            worker(url, f"w{uuid.uuid4().hex[:6]}", db_url, 10, 3)  # warm-up: imports, scripts, connections
            for r in range(a.rounds):
                off, _ = worker(url, f"o{uuid.uuid4().hex[:6]}", None, a.conversations, a.turns)
                on, svc = worker(url, f"r{uuid.uuid4().hex[:6]}", db_url, a.conversations, a.turns)
                entries = svc.store.record_backlog().entries
                took, exported = export_all(svc.store, db_url, a.batch)
                assert exported == entries, (exported, entries)
                produced, written = entries / on, exported / took
                rows["worker_off"].append(n / off)
                rows["worker_on"].append(n / on)
                rows["entries_per_s"].append(produced)
                rows["exported_per_s"].append(written)
                rows["ratio"].append(written / produced)
                print(f"round {r + 1}: worker {n / on:,.0f} turns/s with the record ({n / off:,.0f} without: "
                      f"{off / on:.2f} of it), {produced:,.0f} entries/s; exporter {written:,.0f} entries/s "
                      f"({exported} entries in {took:.2f} s): ratio {written / produced:.2f}", flush=True)
            both = together(url, db_url, a.conversations, a.turns, a.batch)
    finally:
        server.stop()
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"\nmedian of {a.rounds} rounds, {a.conversations} conversations x {a.turns} turns, batch {a.batch}:")
    print(f"  worker (accept + drain + inline delivery, no Celery): {med['worker_on']:,.0f} turns/s with the record, "
          f"{med['worker_off']:,.0f} without (with/without {med['worker_on'] / med['worker_off']:.2f})")
    print(f"  record entries appended: {med['entries_per_s']:,.0f}/s; exported to PostgreSQL: "
          f"{med['exported_per_s']:,.0f}/s")
    print(f"  exporter / worker: {med['ratio']:.2f}x (target >= 1.5x)")
    print(f"  together (exporter process beside the worker): worker {both['turns_per_s']:,.0f} turns/s, backlog "
          f"{both['backlog_at_end']:.0f} entries ({both['lag_at_end_s']:.2f} s old) when the worker stopped, "
          f"drained {both['drained_after_s']:.2f} s later")


if __name__ == "__main__":
    main()
