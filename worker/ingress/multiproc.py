"""prometheus-client's multiprocess mode for the ingress's uvicorn workers, with no set-up by the operator.

prometheus-client chooses where values live when it is first imported: in the process, or (when
``PROMETHEUS_MULTIPROC_DIR`` is set) in files of that directory, which ``GET /metrics`` then sums over every process
that wrote there. uvicorn's ``--workers`` are spawned children of one supervisor; each imports the app itself, so the
directory is derived from the supervisor (its pid and start time: unique while it runs, never reused by the next
one, so no stale counts carry over). A worker uvicorn restarts after a crash joins the same directory and its dead
predecessor's counts stay in the sum, as a counter's should. Directories of supervisors that are gone are removed.

An operator's own ``PROMETHEUS_MULTIPROC_DIR`` is used as it is (they empty it between runs, as prometheus-client
documents). A single process (no ``--workers``, or tests) keeps the ordinary in-process registry.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import pathlib
import shutil
import sys
import tempfile

ENV = "PROMETHEUS_MULTIPROC_DIR"
_ROOT = "parley-ingress-metrics"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), or ``None`` when it is gone or unknown."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count fields after its closing one.
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def _prune(root: pathlib.Path, keep: pathlib.Path) -> None:
    """Remove the directories of supervisors that no longer run (their counts belong to a past run)."""
    for directory in root.iterdir():
        pid, _, started = directory.name.partition("-")
        if directory == keep or not pid.isdigit():
            continue
        if _start_time(int(pid)) != started:
            shutil.rmtree(directory, ignore_errors=True)


def supervisor_dir(root: pathlib.Path | None = None) -> pathlib.Path | None:
    """The directory this process shares with its sibling workers, or ``None`` when it is not a spawned worker."""
    parent = multiprocessing.parent_process()
    if parent is None or parent.pid is None:
        return None
    started = _start_time(parent.pid)
    if started is None:  # not Linux: the pid alone (a reused pid could inherit old counts)
        started = "0"
    base = root or pathlib.Path(tempfile.gettempdir()) / f"{_ROOT}-{os.getuid()}"
    directory = base / f"{parent.pid}-{started}"
    directory.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        _prune(base, directory)
    return directory


def share_metrics_with_sibling_workers() -> None:
    """Set ``PROMETHEUS_MULTIPROC_DIR`` in a uvicorn worker process, before prometheus-client is imported."""
    if ENV in os.environ or "prometheus_client" in sys.modules or "uvicorn" not in sys.modules:
        return
    try:
        directory = supervisor_dir()
    except OSError as exc:  # an unusable temporary directory: each worker keeps its own counts, said once here
        logging.getLogger("parley.ingress").warning(
            "ingress metrics not shared between uvicorn workers (%s); set PROMETHEUS_MULTIPROC_DIR", exc)
        return
    if directory is not None:
        os.environ[ENV] = str(directory)


def multiprocess_dir() -> str | None:
    """The directory the metrics of this process's siblings are summed from, or ``None`` (one process)."""
    from prometheus_client import values

    return os.environ.get(ENV) if getattr(values.ValueClass, "_multiprocess", False) else None
