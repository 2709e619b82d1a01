from __future__ import annotations

import pathlib

import pytest

from tests.support.whatsapp_fixtures import require_folder


@pytest.fixture
def whatsapp_fixtures() -> pathlib.Path:
    """The shared WhatsApp fixtures folder; skipped when absent, failed in CI (tests.support.whatsapp_fixtures)."""
    return require_folder()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``-n``, ``.ci/run``), the files that start real Celery workers (marked ``e2e``: the
    end-to-end and chaos suites, most of the run's time) go first: ``--dist loadfile`` hands out whole files in
    this order, so the long ones start at once and the many short ones fill in beside them and at the end, instead
    of a long file starting last and running alone. The order within a file is kept; a run without xdist keeps the
    collection order."""
    if not hasattr(config, "workerinput"):  # set on xdist's workers only; each must sort the same way
        return
    heavy = {item.path for item in items if item.get_closest_marker("e2e") is not None}
    items.sort(key=lambda item: item.path not in heavy)  # stable: files stay together and in order within
