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


def test_warm_up_sets_the_collector_to_collect_the_young_generation_rarely(monkeypatch: pytest.MonkeyPatch) -> None:
    """At Python's 700 a worker's turns in flight were all promoted to the oldest generation, and the full passes
    that set off cost more CPU than the turns' Redis calls."""
    monkeypatch.setattr(conversation, "service", lambda: None)
    before = gc.get_threshold()
    try:
        conversation._warm_up()
        assert gc.get_threshold() == conversation.GC_THRESHOLDS
        assert gc.get_threshold()[0] >= 10_000
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def test_a_gevent_worker_spawns_its_greenlets_without_their_spawning_tree() -> None:
    gevent = pytest.importorskip("gevent")
    before = gevent.config.track_greenlet_tree
    try:
        conversation._lighter_greenlets()
        assert gevent.Greenlet(lambda: None).spawning_stack is None
    finally:
        gevent.config.track_greenlet_tree = before



def test_parleys_tasks_share_one_result_backend_across_threads_and_greenlets() -> None:
    """Celery builds a (disabled) backend per thread unless told it is thread-safe: per greenlet under gevent, so
    one per task."""
    import threading

    from celery.backends.base import DisabledBackend

    from tasks.app import make_app

    app = make_app()
    seen: list[object] = []
    thread = threading.Thread(target=lambda: seen.append(app.backend))
    thread.start()
    thread.join(5)
    assert isinstance(app.backend, DisabledBackend) and seen == [app.backend]
