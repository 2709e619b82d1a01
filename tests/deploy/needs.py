"""Which settings each process of the deployment reads, found by running its entry point with every read of a
:class:`~worker.settings.Settings` field noted (so the answer follows the code, not a hand list).

``python -m tests.deploy.needs PROCESS`` (``worker``, ``webhook``, ``exporter`` or ``inlet``) starts that process's entry point
as far as it can go without a provider: the worker builds its Celery app and its service; the webhook builds its app
and takes one signed webhook carrying a player's message and a status; the exporter and the inlet run one pass. It prints the
fields read as a JSON list. REDIS_URL (and PARLEY_DATABASE_URL for the exporter) must point at real servers.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import pathlib
import re
import sys
from collections.abc import Callable
from typing import Any

from tests.support.whatsapp_fixtures import as_if_sent_now, fixture_payload
from worker.settings import GROUPS, knobs

ROOT = pathlib.Path(__file__).resolve().parents[2]
APP_SECRET = "probe-secret"


def procfile() -> dict[str, str]:
    """The Procfile's processes: name -> command."""
    return {name: command.strip() for name, _, command in
            (line.partition(":") for line in (ROOT / "Procfile").read_text().splitlines())
            if name.strip() and not name.startswith("#")}


EXAMPLE_ENV = ROOT / "docker" / ".env.example"
CONFIG_DIR = ROOT / "docker" / "config"
CONFIG_MOUNT = "/etc/parley"  # where compose mounts docker/config/ (read-only) in every Parley process

_LINE = re.compile(r"^(#\s*)?([A-Z][A-Z0-9_]*)=(\S*)")


def example_env() -> tuple[dict[str, str], dict[str, str]]:
    """docker/.env.example: the variables it sets, and those it documents in a comment (``# NAME=value``)."""
    active: dict[str, str] = {}
    commented: dict[str, str] = {}
    for line in EXAMPLE_ENV.read_text().splitlines():
        m = _LINE.match(line.strip())
        if m:
            (commented if m.group(1) else active)[m.group(2)] = m.group(3)
    return active, commented


def track() -> set[str]:
    """From now on, note every setting (by its flat name) of every settings group that is read."""
    read: set[str] = set()
    for group in GROUPS.values():
        flat = {name: f for f, (name, _) in knobs(group).items()}
        _spy(group, flat, read)
    return read


def _spy(group: type[Any], flat: dict[str, str], read: set[str]) -> None:
    plain = group.__getattribute__

    def spy(self: Any, name: str) -> Any:
        if name in flat:
            read.add(flat[name])
        return plain(self, name)

    group.__getattribute__ = spy


def _worker() -> None:
    import tasks.app  # noqa: F401  (the Celery app the `celery -A tasks worker` command loads)
    from tasks.conversation import service

    service()


def _webhook() -> None:
    from starlette.testclient import TestClient

    from worker.ingress.app import app

    payloads = [as_if_sent_now(fixture_payload(name)) for name in ("inbound_text.json", "status_sent.json")]
    with TestClient(app) as http:
        for body in payloads:
            raw = json.dumps(body).encode()
            sig = "sha256=" + hmac.new(APP_SECRET.encode(), raw, hashlib.sha256).hexdigest()
            answer = http.post("/webhook", content=raw, headers={"X-Hub-Signature-256": sig,
                                                                   "Content-Type": "application/json"})
            assert answer.status_code == 200, answer.text
        assert http.get("/healthz").status_code == 200


def _exporter() -> None:
    from worker.cli import main

    assert main(["exporter", "--once"]) == 0


def _inlet() -> None:
    from worker.cli import main

    assert main(["inlet", "--once"]) == 0


PROCESSES: dict[str, Callable[[], None]] = {"worker": _worker, "webhook": _webhook, "exporter": _exporter,
                                            "inlet": _inlet}


if __name__ == "__main__":
    seen = track()
    PROCESSES[sys.argv[1]]()
    print(json.dumps(sorted(seen)))
