"""A fresh RabbitMQ virtual host per test on the machine's RabbitMQ (127.0.0.1:5672, guest/guest).

A vhost is RabbitMQ's namespace: queues, exchanges and messages of one test cannot meet another's, and deleting it
removes everything the test left, including the quorum queue and the delayed-delivery exchanges Celery declares.
Made with ``rabbitmqctl`` (root on this machine). Unavailable: skipped on a developer's machine, failed in CI.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid
from dataclasses import dataclass

from tests.support.redis_server import skip_or_fail

HOST = os.environ.get("PARLEY_TEST_RABBITMQ_HOST", "127.0.0.1")
PORT = int(os.environ.get("PARLEY_TEST_RABBITMQ_PORT", "5672"))


def _ctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, timeout=60)


@dataclass
class Vhost:
    name: str

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{HOST}:{PORT}/{self.name}"

    def delete(self) -> None:
        try:
            _ctl("delete_vhost", self.name)
        except (subprocess.SubprocessError, OSError):
            pass


def rabbitmq_vhost() -> Vhost:
    """A new vhost the guest user may use; the caller deletes it."""
    try:
        with socket.create_connection((HOST, PORT), timeout=2):
            pass
    except OSError as exc:
        skip_or_fail(f"RabbitMQ is not reachable at {HOST}:{PORT}: {exc}")
    if shutil.which("rabbitmqctl") is None:
        skip_or_fail("rabbitmqctl is not installed (needed to make a vhost per test)")
    vhost = Vhost(f"parley-test-{uuid.uuid4().hex[:10]}")
    try:
        _ctl("add_vhost", vhost.name)
        _ctl("set_permissions", "-p", vhost.name, "guest", ".*", ".*", ".*")
    except subprocess.CalledProcessError as exc:
        skip_or_fail(f"rabbitmqctl could not make a vhost: {exc.stderr.decode(errors='replace')[-300:]}")
    return vhost
