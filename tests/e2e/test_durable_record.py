"""End to end: the durable record. Two real Celery workers apply chat turns and game events with the record on, a
real `parley exporter` process copies the record streams to the real PostgreSQL while they run (SIGKILLed once
mid-run and started again), and the transcript in PostgreSQL matches every input the producers sent and every reply
WhatsApp received, in order, once each."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest

from tests.e2e.conftest import Cluster
from tests.support.postgres import fresh_database
from tests.support.workers import ROOT, wait_until
from worker.durable_record import database
from worker.store.limits import StoreLimits

pytestmark = pytest.mark.e2e


def _parley(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "worker.cli", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_the_transcript_in_postgresql_matches_every_input_and_reply(cluster: Cluster) -> None:
    with fresh_database() as url:
        env = {**cluster.env, "PARLEY_DATABASE_URL": url, "PARLEY_RECORD_STREAM_MAX": "100000"}
        up = _parley(env, "db", "upgrade")
        assert up.returncode == 0 and "applied 0001_initial" in up.stdout, up.stderr
        cluster.start_worker("r1", env=env)
        cluster.start_worker("r2", env=env)
        log_path = os.path.join(ROOT, f".exporter-{os.getpid()}.log")

        def start_exporter() -> subprocess.Popen[bytes]:
            with open(log_path, "ab") as log:
                return subprocess.Popen([sys.executable, "-m", "worker.cli", "exporter"], cwd=ROOT, stdout=log,
                                        stderr=subprocess.STDOUT,
                                        env={**env, "PARLEY_EXPORTER_IDLE_SECONDS": "0.05",
                                             "PARLEY_EXPORTER_BATCH": "7"})

        exporter = start_exporter()
        watch = database.connect(url)
        try:
            client = cluster.client()
            cids = [f"4477008{i:05d}" for i in range(6)]
            sent: dict[str, list[tuple[str, str]]] = {c: [] for c in cids}
            for n in range(6):
                for cid in cids:
                    if n == 3:
                        client.send_event(cid, f"{cid} tagged Harrogate Theatre", message_id=f"{cid}-e")
                        sent[cid].append(("event", f"{cid} tagged Harrogate Theatre"))
                    client.send_message(cid, f"{cid} line {n}", message_id=f"{cid}-{n}")
                    sent[cid].append(("player", f"{cid} line {n}"))
            # Killed mid-run, once it has written something: a batch may be in the database but not yet trimmed from
            # the stream; the next exporter writes it again and the rows' keys make that change nothing.
            assert wait_until(lambda: watch.execute("SELECT count(*) FROM records").fetchone()[0] > 0, 60)
            exporter.kill()
            exporter.wait(10)
            exporter = start_exporter()
            assert wait_until(lambda: all(len(cluster.whatsapp.texts_for(c)) >= 6 for c in cids), 90), \
                cluster.workers[0].log()[-3000:]
            store = cluster.store()
            # Settled: every reply delivered (its ``sent`` entry appended) and the exporter caught up.
            wait_until(lambda: all(store.outbox_depth(c) == 0 for c in cids), 30)
            reader = type(store)(store._client, prefix=store.prefix, limits=StoreLimits(record_max=1))
            assert wait_until(lambda: reader.record_backlog().entries == 0, 60), pathlib.Path(log_path).read_text()[-3000:]
        finally:
            watch.close()
            exporter.send_signal(signal.SIGTERM)
            code = exporter.wait(30)
            output = pathlib.Path(log_path).read_text()
            os.unlink(log_path)
        assert code == 0, output[-3000:]
        conn = database.connect(url)
        for cid in cids:
            lines = database.transcript(conn, cid)
            inputs = [(ln.role, ln.text) for ln in lines if ln.role in ("player", "event")]
            assert inputs == sent[cid]
            replies = [ln.text for ln in lines if ln.role == "assistant"]
            assert replies == cluster.whatsapp.texts_for(cid)
            assert all(ln.status == "sent" for ln in lines if ln.role == "assistant")
        [usage] = database.usage(conn, __import__("datetime").date.today(), cids[0])
        assert usage.turns == 6 and usage.prompt_tokens > 0
        conn.close()
        shown = _parley(env, "transcript", cids[0], "--json")
        assert shown.returncode == 0, shown.stderr
        assert [json.loads(line)["text"] for line in shown.stdout.splitlines()][:2] == [f"{cids[0]} line 0",
                                                                                      f"ack:{cids[0]} line 0"]
        deleted = _parley(env, "delete", cids[0])
        assert deleted.returncode == 0 and "records in the database" in deleted.stdout, deleted.stderr
        conn = database.connect(url)
        assert database.transcript(conn, cids[0]) == []
        conn.close()
