"""The broker configuration the workers and the producers share (worker.queue.broker): Redis-only options stay off
RabbitMQ, RabbitMQ gets a quorum queue and publisher confirms, and both ends declare the queue alike."""

from __future__ import annotations

import pytest

from worker.queue.broker import QUEUE, broker_conf, conn_label, is_amqp
from worker.queue.wakeup import celery_waker
from worker.settings import Settings


def _settings(broker: str) -> Settings:
    return Settings(_env_file=None, redis_url="redis://127.0.0.1:1/0", broker_url=broker)  # type: ignore[call-arg]


@pytest.mark.parametrize("url", ["amqp://guest:guest@h:5672//", "pyamqp://h//", "amqps://h/v"])
def test_rabbitmq_gets_a_quorum_queue_and_publisher_confirms(url: str) -> None:
    assert is_amqp(url)
    conf = broker_conf(_settings(url))
    (queue,) = conf["task_queues"]
    assert queue.name == QUEUE and queue.durable and queue.queue_arguments == {"x-queue-type": "quorum"}
    assert conf["broker_transport_options"] == {"confirm_publish": True}
    assert conf["worker_detect_quorum_queues"] is True


def test_redis_keeps_its_visibility_timeout_and_no_queue_arguments() -> None:
    conf = broker_conf(_settings("redis://127.0.0.1:2/0"))
    assert not is_amqp("redis://127.0.0.1:2/0")
    assert "task_queues" not in conf
    assert conf["broker_transport_options"]["visibility_timeout"] > 0


def test_the_producer_declares_the_queue_as_the_workers_do() -> None:
    from tasks.app import make_app

    s = _settings("amqp://guest:guest@127.0.0.1:1//")
    app, waker = make_app(s), celery_waker(s)
    assert waker.app.conf.broker_url == app.conf.broker_url
    assert [q.queue_arguments for q in waker.app.conf.task_queues] == [q.queue_arguments for q in app.conf.task_queues]
    assert waker.app.conf.broker_transport_options == app.conf.broker_transport_options


def test_a_broker_named_in_a_message_shows_no_password() -> None:
    assert conn_label("amqp://guest:secret@rabbit:5672/prod") == "amqp://rabbit:5672/prod"
