"""The producers' waker publishes exactly what the workers consume, without importing the Celery app."""

from __future__ import annotations

import subprocess
import sys
import uuid

import kombu
import msgpack
import pytest

from worker.settings import Settings
from worker.wakeup import DELIVER, DRAIN, QUEUE, CeleryWaker, celery_waker


def test_the_waker_matches_the_task_apps_queue_serialiser_and_transport() -> None:
    from tasks.app import QUEUE as TASKS_QUEUE
    from tasks.app import make_app

    s = Settings(_env_file=None, redis_url="redis://127.0.0.1:1/0", visibility_timeout=1234.0)  # type: ignore[call-arg]
    app, waker = make_app(s), celery_waker(s)
    assert QUEUE == TASKS_QUEUE == app.conf.task_default_queue
    assert waker.app.conf.broker_url == app.conf.broker_url
    for key, value in waker.app.conf.broker_transport_options.items():
        assert app.conf.broker_transport_options[key] == value
    assert waker.app.conf.task_serializer == app.conf.task_serializer == "msgpack"
    import tasks.conversation  # noqa: F401  (registers the tasks)

    assert {DRAIN, DELIVER} <= set(app.tasks)


@pytest.mark.parametrize("task", [DRAIN, DELIVER])
def test_a_wake_up_is_a_msgpack_task_message_on_the_workers_queue(task: str) -> None:
    broker = f"memory://wake-{uuid.uuid4().hex[:8]}"
    CeleryWaker(broker, task=task)("447700900123")
    with kombu.Connection(broker) as conn:
        message = conn.SimpleQueue(QUEUE, accept=["msgpack"]).get(timeout=2)
        assert message.headers["task"] == task
        assert message.content_type == "application/x-msgpack"
        args, kwargs, _ = msgpack.unpackb(message.body, raw=False)
        assert args == ["447700900123"] and kwargs == {}
        assert message.delivery_info["routing_key"] == QUEUE
        message.ack()


def test_importing_the_client_and_waking_does_not_import_the_task_app() -> None:
    code = ("import sys, uuid\n"
            "from worker.client import ConversationClient\n"
            "from worker.wakeup import CeleryWaker\n"
            "CeleryWaker(f'memory://{uuid.uuid4().hex}')('c1')\n"
            "assert not [m for m in sys.modules if m == 'tasks' or m.startswith('tasks.')], sorted(sys.modules)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
