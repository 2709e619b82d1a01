"""The deployment files: Procfile, compose file and Dockerfile agree with the code (docker's engine does not
run on these machines, so they are validated here)."""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import time

import yaml

from worker.settings import Settings

ROOT = pathlib.Path(__file__).resolve().parents[2]


def known_env() -> set[str]:
    names = set()
    for name, field in Settings.model_fields.items():
        names.add(f"PARLEY_{name.upper()}")
        alias = field.validation_alias
        if alias is not None and hasattr(alias, "choices"):
            names.update(str(c) for c in alias.choices)
    return names


def test_procfile_names_every_process() -> None:
    procs = dict(line.split(":", 1) for line in (ROOT / "Procfile").read_text().splitlines()
                 if line.strip() and not line.startswith("#"))
    assert set(procs) == {"worker", "webhook", "exporter"}
    assert procs["exporter"].strip() == "parley exporter"
    assert "celery -A tasks worker" in procs["worker"] and "--pool ${PARLEY_POOL:-gevent}" in procs["worker"]
    assert "worker.ingress.app:app" in procs["webhook"]


def test_compose_file_is_valid_and_uses_known_settings() -> None:
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    services = compose["services"]
    assert {"redis", "worker", "webhook"} <= set(services)
    assert "--appendonly" in services["redis"]["command"]
    known = known_env()
    for name in ("worker", "webhook"):
        svc = services[name]
        assert svc["build"]["dockerfile"] == "docker/Dockerfile"
        assert (ROOT / svc["build"]["context"].replace("..", ".")).exists() or svc["build"]["context"] == ".."
        unknown = set(svc["environment"]) - known
        assert not unknown, f"{name}: unknown settings {unknown}"
    assert services["worker"]["command"][:4] == ["celery", "-A", "tasks", "worker"]
    # Supervised: a process that exits (a crash, a kill) is started again; the sweeper resumes its work.
    assert all(services[n].get("restart") in ("unless-stopped", "always") for n in ("redis", "worker", "webhook"))
    # The durable record: PostgreSQL and the exporter, behind the "record" profile.
    assert services["exporter"]["profiles"] == ["record"] and services["postgres"]["profiles"] == ["record"]
    assert "parley exporter" in " ".join(services["exporter"]["command"])
    assert not set(services["exporter"]["environment"]) - known


def test_dockerfile_copies_what_exists() -> None:
    text = (ROOT / "docker" / "Dockerfile").read_text()
    for src in re.findall(r"^COPY (\S+)", text, flags=re.M):
        assert (ROOT / src).exists(), src
    assert "parley health" in text


def _env_without_parley(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_") and k != "REDIS_URL"}
    env.update(extra)
    return env


def test_the_procfile_exporter_without_a_database_stays_up_idle_until_sigterm(tmp_path: pathlib.Path) -> None:
    """honcho and foreman stop the whole formation when any process exits (even with 0): without
    PARLEY_DATABASE_URL the Procfile's `parley exporter` stays up, says why once, and stops cleanly on SIGTERM."""
    procs = dict(line.split(":", 1) for line in (ROOT / "Procfile").read_text().splitlines()
                 if line.strip() and not line.startswith("#"))
    argv = shlex.split(procs["exporter"])
    argv[0] = str(pathlib.Path(sys.executable).with_name(argv[0]))  # the worktree's own console script
    proc = subprocess.Popen(argv, cwd=tmp_path, env=_env_without_parley(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(4)
        assert proc.poll() is None, f"the exporter exited ({proc.returncode}): {proc.communicate()[1]}"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    lines = [ln for ln in (out + err).splitlines() if ln.strip()]
    assert len(lines) == 1 and "PARLEY_DATABASE_URL is not set" in lines[0], lines
