"""The Go producer in examples/go, built with `go build` and run against a real API: the webhook process under
uvicorn, configured from the environment, on a free port, with a Redis of the test's own. Go is Debian's golang-go;
without it the test installs it in CI (scripts/install-go) and skips elsewhere."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

from tests.support.api_server import ApiProcess
from tests.support.redis_server import RedisServer, in_ci, redis_of_its_own
from worker.envelopes.inputs import decode_envelope
from worker.store.redis_store import ConversationStore

ROOT = pathlib.Path(__file__).resolve().parents[2]
CID = "447700900123"


def _go() -> str:
    go = shutil.which("go")
    if go is None and in_ci():
        subprocess.run([str(ROOT / "scripts" / "install-go")], check=True, timeout=900)
        go = shutil.which("go")
    if go is None:
        pytest.skip("no Go toolchain (CI installs Debian's golang-go with scripts/install-go)")
    return go


redis_server = pytest.fixture(redis_of_its_own)


def test_the_go_producer_sends_an_event_and_a_message_and_reads_the_summary(
        redis_server: RedisServer, tmp_path: pathlib.Path) -> None:
    go = _go()
    env = {**os.environ, "GOCACHE": str(tmp_path / "gocache"), "GOPATH": str(tmp_path / "gopath"), "GOFLAGS": "",
           "GO111MODULE": "on", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}
    binary = tmp_path / "parley-producer"
    subprocess.run([go, "build", "-o", str(binary), "."], cwd=ROOT / "examples" / "go", env=env, check=True,
                   timeout=600)
    api = ApiProcess(redis_server.url, "game-token,operator:ops-token").start()
    try:
        run = [str(binary), "-url", api.url, "-token", "game-token", "-conversation", CID]
        first = subprocess.run(run, capture_output=True, text=True, timeout=60)
        again = subprocess.run(run, capture_output=True, text=True, timeout=60)
        refused = subprocess.run([*run[:-3], "wrong-token", *run[-2:]], capture_output=True, text=True, timeout=60)
    finally:
        api.stop()
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == ["event tag-8812 duplicate=false", "message msg-0001 duplicate=false",
                                         "nudge nudge-1 cancelled=true",
                                         "summary mailbox_depth=5 outbox_depth=0 version=0"]
    # Run again: the same message ids are duplicates, nothing new is queued (a cancelled timer's id may be held
    # again, and is cancelled again).
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == ["event tag-8812 duplicate=true", "message msg-0001 duplicate=true",
                                         "nudge nudge-1 cancelled=true",
                                         "summary mailbox_depth=5 outbox_depth=0 version=0"]
    assert refused.returncode == 1 and "401" in refused.stderr and "POST /v1/conversations/" in refused.stderr
    store = ConversationStore(redis_server.client())
    queued = [decode_envelope(p) for _, p in store.inbox(CID)]
    assert [(e.kind, e.message_id, e.pinned, e.key, e.respond) for e in queued] == [
        ("event", "tag-8812", True, None, None), ("message", "msg-0001", False, None, None),
        ("event", "target-1", False, "target", None), ("event", "target-2", False, "target", None),
        ("event", "tag-8813", False, None, True)]
    assert store.scheduled(CID) == []  # the nudge was held, then cancelled
