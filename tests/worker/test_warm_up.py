"""A worker process builds its service and freezes its long-lived objects before the first task."""

from __future__ import annotations

import gc

import pytest

import tasks.conversation as conversation


def test_warm_up_builds_the_service_and_freezes_what_is_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[bool] = []
    monkeypatch.setattr(conversation, "service", lambda: built.append(True))
    gc.unfreeze()
    try:
        conversation._warm_up()
        assert built == [True]
        assert gc.get_freeze_count() > 0  # full collections no longer walk them: no periodic stall of every turn
    finally:
        gc.unfreeze()


def test_warm_up_survives_a_redis_that_is_down(monkeypatch: pytest.MonkeyPatch) -> None:
    def down() -> None:
        raise ConnectionError("redis is down")

    monkeypatch.setattr(conversation, "service", down)
    try:
        conversation._warm_up()  # logged; the first task builds the service instead
    finally:
        gc.unfreeze()
