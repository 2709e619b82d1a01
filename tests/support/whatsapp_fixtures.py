"""The shared WhatsApp payloads (``../shared/fixtures/whatsapp`` next to the project) the ingress and delivery
tests read, and the one rule for their absence: the rule of a missing server (:func:`skip_or_fail`) — skipped on
a developer's machine, failed in CI, where a suite that quietly stopped reading the real shapes would stay green
while testing nothing.

Read them through :func:`fixture_path` / :func:`fixture_payload` (the rule is applied there); mark a test that
needs the folder without reading a file with :data:`needs_fixtures`; parametrize over :func:`fixture_names`, which
gives one placeholder name when nothing matches: an empty parameter set would be skipped whatever CI says.
"""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.redis_server import skip_or_fail

WHATSAPP = pathlib.Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "whatsapp"
MISSING = "no-shared-fixture.json"  # the placeholder: reading it applies the rule


def require_folder() -> pathlib.Path:
    if not WHATSAPP.is_dir():
        skip_or_fail(f"the shared WhatsApp fixtures are not at {WHATSAPP}")
    return WHATSAPP


def fixture_path(name: str) -> pathlib.Path:
    path = require_folder() / name
    if not path.is_file():
        skip_or_fail(f"the shared WhatsApp fixture {name} is not in {WHATSAPP}")
    return path


def fixture_file(name: str) -> dict[str, Any]:
    """The whole fixture: ``source``, ``http_status``, ``payload``."""
    data: dict[str, Any] = json.loads(fixture_path(name).read_text(encoding="utf-8"))
    return data


def fixture_payload(name: str) -> dict[str, Any]:
    payload: dict[str, Any] = fixture_file(name)["payload"]
    return payload


def fixture_names(pattern: str = "*.json", keep: Callable[[str], bool] = lambda name: True) -> list[str]:
    """The sorted names of the fixtures matching ``pattern`` that ``keep`` accepts; ``[MISSING]`` when none."""
    found = sorted(p.name for p in WHATSAPP.glob(pattern) if keep(p.name)) if WHATSAPP.is_dir() else []
    return found or [MISSING]


needs_fixtures = pytest.mark.usefixtures("whatsapp_fixtures")
"""For a test that needs the folder without reading a file through :func:`fixture_path` (the fixture
``whatsapp_fixtures`` of tests/conftest.py applies the rule)."""


def as_if_sent_now(obj: Any) -> Any:
    """``obj`` as if Meta sent it now: every ``timestamp`` is the current time (the fixtures were captured years
    ago, and the ingress refuses messages older than PARLEY_WEBHOOK_MAX_AGE_SECONDS)."""
    now = str(int(time.time()))
    if isinstance(obj, dict):
        return {k: now if k == "timestamp" else as_if_sent_now(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [as_if_sent_now(v) for v in obj]
    return obj
