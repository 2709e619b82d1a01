"""The directory the ingress's uvicorn workers share their metrics in (the Procfile test in test_metrics.py runs
the real thing): one per running supervisor, the directories of supervisors that are gone removed."""

from __future__ import annotations

import multiprocessing
import os
import pathlib
import sys
import tempfile
import types

import pytest

from worker.ingress import multiproc


class FakeParent:
    def __init__(self, pid: int) -> None:
        self.pid = pid


def test_a_process_that_is_not_a_spawned_worker_keeps_its_own_registry(tmp_path: pathlib.Path) -> None:
    assert multiprocessing.parent_process() is None  # pytest's own process
    assert multiproc.supervisor_dir(tmp_path) is None


def test_siblings_share_the_supervisors_directory_and_dead_supervisors_are_cleared(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    me = os.getpid()  # stands in for the running supervisor
    monkeypatch.setattr(multiprocessing, "parent_process", lambda: FakeParent(me))
    started = multiproc._start_time(me)
    assert started is not None and started.isdigit()
    gone = tmp_path / "999999999-1"  # no such pid
    reused = tmp_path / f"{me}-0"  # this pid, but another start: a supervisor of a past run
    for d in (gone, reused):
        d.mkdir()
        (d / "counter_1.db").write_bytes(b"old counts")
    first = multiproc.supervisor_dir(tmp_path)
    second = multiproc.supervisor_dir(tmp_path)  # the sibling worker
    assert first == second == tmp_path / f"{me}-{started}"
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{me}-{started}"]


def test_an_unusable_temporary_directory_leaves_each_worker_its_own_counts(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(multiprocessing, "parent_process", lambda: FakeParent(os.getpid()))
    environ = {k: v for k, v in os.environ.items() if k != multiproc.ENV}
    monkeypatch.setattr(os, "environ", environ)
    monkeypatch.setitem(sys.modules, "uvicorn", sys.modules.get("uvicorn") or types.ModuleType("uvicorn"))
    monkeypatch.delitem(sys.modules, "prometheus_client", raising=False)  # as in a fresh worker, before anything imported it
    (tmp_path / "not-a-dir").write_text("")  # (mode bits would not stop root)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "not-a-dir"))
    multiproc.share_metrics_with_sibling_workers()  # no exception: the app still starts
    assert multiproc.ENV not in environ
