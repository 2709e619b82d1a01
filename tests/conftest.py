from __future__ import annotations

import pathlib

import pytest

from tests.support.whatsapp_fixtures import require_folder


@pytest.fixture
def whatsapp_fixtures() -> pathlib.Path:
    """The shared WhatsApp fixtures folder; skipped when absent, failed in CI (tests.support.whatsapp_fixtures)."""
    return require_folder()
