"""End to end with a stdio MCP server: real Celery workers given the published ``mcp-server-time`` in the manifest,
a loopback model that calls it, and the server's processes: one per pool process that ran a turn, started by that
process (never by the main process before the fork), and none left once the worker stops or is killed."""

from __future__ import annotations

import json
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.e2e.conftest import Cluster
from tests.support.mcp_stdio import ROOT, mcp_server_time
from tests.support.workers import WorkerProcess, wait_until

pytestmark = pytest.mark.e2e


def _servers(mark: str) -> list[psutil.Process]:
    """The server processes of this test (their environment carries its mark)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("PARLEY_TEST_MARK") == mark and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


@pytest.fixture()
def mark() -> Iterator[str]:
    """This test's mark; a server a failed test left behind is ended here, not left to outlive the run."""
    mark = uuid.uuid4().hex
    yield mark
    for p in _servers(mark):
        p.kill()


def _start(cluster: Cluster, tmp_path: Path, pool: str, mark: str, stubborn: bool = False) -> WorkerProcess:
    """A worker whose turns call mcp-server-time, or (``stubborn``) a server that outlives its closed stdin."""
    server = {**mcp_server_time(), "env": {"PARLEY_TEST_MARK": mark}}
    if stubborn:  # the shell sleeps on after the server exits: only the SDK's SIGTERM ends it
        server = {"command": "sh", "args": ["-c", f"{sys.executable} -m tests.support.mcp_stdio; sleep 300"],
                  "env": {"PARLEY_TEST_MARK": mark, "PYTHONPATH": str(ROOT)}}
    (tmp_path / "tools.json").write_text(json.dumps({"mcp_servers": [server]}))
    cluster.env["PARLEY_TOOLS_FILE"] = str(tmp_path / "tools.json")
    cluster.llm.plan_tools = lambda body: [("pid" if stubborn else "get_current_time", {"timezone": "Europe/Oslo"})]
    w = cluster.start_worker("w1", pool=pool, concurrency=2)
    client = cluster.client()
    cids = [f"4477002{i:05d}" for i in range(4)]
    for cid in cids:
        client.send_message(cid, "what time is it?", message_id=f"{cid}-m1")
    assert wait_until(lambda: len(cluster.whatsapp.sent) >= len(cids), 60), w.log()
    for cid in cids:
        [reply] = cluster.whatsapp.texts_for(cid)
        assert stubborn or ('"timezone": "Europe/Oslo"' in reply and '"day_of_week"' in reply), reply
    return w


@pytest.mark.parametrize("pool", ["prefork", "threads", "gevent"])
def test_a_worker_runs_the_stdio_server_per_process_and_stops_it(cluster: Cluster, tmp_path: Path, pool: str,
                                                                 mark: str) -> None:
    w = _start(cluster, tmp_path, pool, mark)
    assert w.proc is not None
    servers = _servers(mark)
    parents = {s.ppid() for s in servers}
    assert servers and len(servers) <= (2 if pool == "prefork" else 1)
    # the main process never starts one under prefork: each is a pool child's own
    assert (w.proc.pid in parents) == (pool != "prefork"), (w.proc.pid, parents)
    w.stop()
    assert wait_until(lambda: not _servers(mark), 10), [s.cmdline() for s in _servers(mark)]


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_a_stopping_worker_ends_a_server_that_ignores_its_closed_stdin(cluster: Cluster, tmp_path: Path,
                                                                      pool: str, mark: str) -> None:
    w = _start(cluster, tmp_path, pool, mark, stubborn=True)
    assert _servers(mark)
    w.stop()
    assert wait_until(lambda: not _servers(mark), 10), [s.cmdline() for s in _servers(mark)]


def test_a_killed_worker_leaves_no_server(cluster: Cluster, tmp_path: Path, mark: str) -> None:
    w = _start(cluster, tmp_path, "prefork", mark)
    assert _servers(mark)
    w.kill(signal.SIGKILL)  # no shutdown signal: each server sees its stdin close and exits by itself
    assert wait_until(lambda: not _servers(mark), 10), [s.cmdline() for s in _servers(mark)]


def test_a_command_that_cannot_be_found_stops_the_worker_at_start(cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "tools.yaml").write_text("mcp_servers:\n  - command: mcp-server-tiem\n")
    cluster.env["PARLEY_TOOLS_FILE"] = str(tmp_path / "tools.yaml")
    w = cluster.start_worker("w1", pool="prefork", concurrency=1)
    assert wait_until(lambda: not w.alive(), 30), w.log()
    assert "mcp_servers (command 'mcp-server-tiem'): no such executable" in w.log()
