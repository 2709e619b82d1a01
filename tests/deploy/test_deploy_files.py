"""The deployment files: Procfile, compose file and Dockerfile agree with the code (docker's engine does not
run on these machines, so they are validated here)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

import pytest
import yaml

from tests.deploy import needs
from tests.support.postgres import fresh_database
from tests.support.redis_server import start_redis
from worker.settings import GROUPS, env_name, knobs

ROOT = needs.ROOT


def known_env() -> set[str]:
    return set(_field_of_env())


def test_procfile_names_every_process() -> None:
    procs = needs.procfile()
    assert set(procs) == {"worker", "webhook", "exporter", "inlet"}
    assert procs["exporter"].strip() == "parley exporter"
    assert procs["inlet"].strip() == "parley inlet"
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
        unknown = set(svc["environment"]) - known - _otel(svc["environment"])
        assert not unknown, f"{name}: unknown settings {unknown}"
    assert services["worker"]["command"][:4] == ["celery", "-A", "tasks", "worker"]
    # Supervised: a process that exits (a crash, a kill) is started again; the sweeper resumes its work.
    assert all(services[n].get("restart") in ("unless-stopped", "always") for n in ("redis", "worker", "webhook"))
    # The durable record: PostgreSQL and the exporter, behind the "record" profile.
    assert services["exporter"]["profiles"] == ["record"] and services["postgres"]["profiles"] == ["record"]
    assert "parley exporter" in " ".join(services["exporter"]["command"])
    assert not set(services["exporter"]["environment"]) - known - _otel(services["exporter"]["environment"])


def _otel(names: object) -> set[str]:
    """OpenTelemetry's own variables (OTEL_SERVICE_NAME, ...): the SDK reads them, no Parley setting."""
    return {n for n in names if isinstance(n, str) and n.startswith("OTEL_")}  # type: ignore[attr-defined]


def test_dockerfile_copies_what_exists() -> None:
    text = (ROOT / "docker" / "Dockerfile").read_text()
    for src in re.findall(r"^COPY (\S+)", text, flags=re.M):
        assert (ROOT / src).exists(), src
    assert "parley health" in text
    # Traces need OpenTelemetry's SDK in the image: setting OTEL_EXPORTER_OTLP_ENDPOINT in docker/.env is enough.
    [extras] = re.findall(r'^ARG EXTRAS="([^"]*)"', text, flags=re.M)
    assert "otel" in extras.split(","), extras


def _env_without_parley(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_") and k != "REDIS_URL"}
    env.update(extra)
    return env


def test_the_procfile_exporter_without_a_database_stays_up_idle_until_sigterm(tmp_path: pathlib.Path) -> None:
    """honcho and foreman stop the whole formation when any process exits (even with 0): without
    PARLEY_DATABASE_URL the Procfile's `parley exporter` stays up, says why once, and stops cleanly on SIGTERM."""
    procs = needs.procfile()
    argv = shlex.split(procs["exporter"])
    argv[0] = str(pathlib.Path(sys.executable).with_name(argv[0]))  # the worktree's own console script
    proc = subprocess.Popen(argv, cwd=tmp_path, env=_env_without_parley(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    said: list[str] = []
    ready = threading.Event()

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            said.append(line)
            if "PARLEY_DATABASE_URL is not set" in line:
                ready.set()  # said once its SIGTERM handler is in place (a loaded machine may take long to get there)

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert ready.wait(120), f"the exporter said nothing (exit code {proc.poll()}): {said}"
        time.sleep(0.5)  # it stays up past saying so
        assert proc.poll() is None, f"the exporter exited ({proc.returncode}): {said}"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
        reader.join(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    lines = [ln for ln in (out + "".join(said)).splitlines() if ln.strip()]
    assert len(lines) == 1 and "PARLEY_DATABASE_URL is not set" in lines[0], lines


# Settings that are each process's own (two processes on one host must not share a metrics port).
PER_PROCESS = {"metrics_port"}


def _field_of_env() -> dict[str, str]:
    """Every environment variable a setting is read from -> the setting."""
    out = {}
    for group in GROUPS.values():
        for name, (_, field) in knobs(group).items():
            out[f"PARLEY_{name.upper()}"] = name
            out[env_name(name, field)] = name
    return out


def _reads(process: str, redis_url: str, database_url: str) -> set[str]:
    """The settings ``process``'s entry point reads (tests/deploy/needs.py runs it in a fresh interpreter)."""
    env = _env_without_parley(REDIS_URL=redis_url, PARLEY_KEY_PREFIX=f"needs{os.getpid()}",
                              WHATSAPP_APP_SECRET=needs.APP_SECRET, PARLEY_DATABASE_URL=database_url)
    if process != "exporter":
        del env["PARLEY_DATABASE_URL"]
    done = subprocess.run([sys.executable, "-m", "tests.deploy.needs", process], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def reads() -> dict[str, set[str]]:
    """The settings each Procfile process's entry point reads."""
    server = start_redis()
    try:
        with fresh_database() as database_url:
            return {name: _reads(name, server.url, database_url) for name in needs.procfile()}
    finally:
        server.stop()


def test_every_process_gets_the_deployment_settings_its_code_reads(reads: dict[str, set[str]]) -> None:
    """A setting the compose file configures for one process must reach every process whose entry point reads it,
    with the same value: the webhook wakes workers through PARLEY_BROKER_URL (on Redis where no worker listens,
    every message waited for the sweeper) and records statuses and deletes (PARLEY_DATABASE_URL). What a process
    reads is found by running it (tests/deploy/needs.py), and every Procfile process is one of compose's."""
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())["services"]
    procfile = needs.procfile()
    assert set(procfile) == set(needs.PROCESSES) <= set(compose)
    for name, command in procfile.items():  # the same entry point in both files
        entry = shlex.split(command)[:2]
        assert " ".join(entry) in " ".join(compose[name]["command"]), (name, entry)
    field = _field_of_env()
    given = {name: {field[k]: str(v) for k, v in compose[name]["environment"].items() if k in field}
             for name in procfile}
    configured = set().union(*given.values()) - PER_PROCESS
    for name in procfile:
        missing = (reads[name] & configured) - set(given[name])
        assert not missing, f"compose's {name} reads {sorted(missing)} but is not given them"
    for setting in configured:
        values = {given[n][setting] for n in procfile if setting in given[n] and setting in reads[n]}
        assert len(values) <= 1, f"{setting} differs between processes: {values}"


def _env_files(service: dict[str, object]) -> list[str]:
    """The env files a compose service names (short form or ``{path, required}``)."""
    given = service.get("env_file", [])
    entries = [given] if isinstance(given, str | dict) else list(given)  # type: ignore[call-overload]
    return [e if isinstance(e, str) else str(e["path"]) for e in entries]


def test_one_env_file_and_one_config_folder_reach_every_setting_each_process_reads(reads: dict[str, set[str]]) -> None:
    """An operator edits docker/.env and docker/config/ and nothing else: every Procfile process's service reads the
    one .env (compose's env_file) and mounts the config folder read-only; a value the compose file sets for a
    setting the process reads interpolates that same variable (so .env decides it), unless it is the process's own
    (a metrics port). What a process reads is found by running it (tests/deploy/needs.py), over every setting of
    worker/settings (docs/configuration.md's table): a new one reaches every process through the env file."""
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())["services"]
    field = _field_of_env()
    for name in needs.procfile():
        svc = compose[name]
        assert _env_files(svc) == [".env"], f"{name} reads no docker/.env"
        assert f"./config:{needs.CONFIG_MOUNT}:ro" in svc["volumes"], f"{name} does not mount docker/config/"
        for var, value in svc["environment"].items():
            setting = field.get(var)
            if setting is None or setting in PER_PROCESS or setting not in reads[name]:
                continue
            assert re.fullmatch(r"\$\{" + re.escape(var) + r"(:-[^}]*)?\}", str(value)), (
                f"compose's {name} fixes {var} to {value!r}: docker/.env cannot set it")


def test_the_example_env_names_the_game_files_in_the_config_folder(reads: dict[str, set[str]]) -> None:
    """Every setting naming a file (the system prompt, the tools, the numbers) that a process reads is in
    docker/.env.example, pointing into the mounted config folder at a file docker/config/ ships; the example sets
    only known settings (and OpenTelemetry's variables, and the ``${VAR}`` the config files read)."""
    active, commented = needs.example_env()
    documented = {**commented, **active}
    field = _field_of_env()
    read = set().union(*reads.values())
    files = {var: setting for var, setting in field.items()
             if setting.endswith("_file") and setting in read and var.startswith("PARLEY_")}
    assert {"PARLEY_SYSTEM_PROMPT_FILE", "PARLEY_TOOLS_FILE", "PARLEY_WHATSAPP_NUMBERS_FILE"} <= set(files)
    for var in files:
        assert var in documented, f"docker/.env.example does not name {var}"
        path = pathlib.PurePosixPath(documented[var])
        assert path.parent == pathlib.PurePosixPath(needs.CONFIG_MOUNT), (var, path)
        assert (needs.CONFIG_DIR / path.name).is_file(), f"docker/config/ has no {path.name} ({var})"
    referenced = set(re.findall(r"\$\{([A-Z0-9_]+)\}", "".join(
        p.read_text() for p in needs.CONFIG_DIR.iterdir() if p.is_file())))
    unknown = set(documented) - set(field) - _otel(documented) - referenced
    assert not unknown, f"docker/.env.example names unknown variables {unknown}"
    assert referenced <= set(documented), f"the config files read {referenced - set(documented)}, not in the example"
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in documented
