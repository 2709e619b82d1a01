"""The real webhook ingress on a free loopback port, and a stand-in for Meta posting status webhooks to it.

:class:`IngressServer` serves :func:`worker.ingress.app.create_app` under uvicorn in a thread, on a socket bound to
127.0.0.1 and a port the system picks. :class:`StatusPoster` plays Meta's side: for each send the loopback WhatsApp
accepted it posts the message's status webhooks (``sent``, then ``delivered``: one POST each, in Meta's shape, with
the ``biz_opaque_callback_data`` the send carried), signed ``X-Hub-Signature-256`` with the app secret, from a
thread of its own, retrying a POST that is not answered 200 as Meta does.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import queue
import socket
import threading
import time
from typing import Any

import httpx
import uvicorn

from worker.client import ConversationClient
from worker.ingress.app import create_app


class IngressServer:
    """The ingress app bound to ``client`` (and its store), served on loopback until :meth:`stop`."""

    def __init__(self, client: ConversationClient, *, app_secret: str, verify_token: str = "verify") -> None:
        app = create_app(client, client.store, app_secret=app_secret, verify_token=verify_token)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def start(self) -> IngressServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.server.started, "the ingress did not start"
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(10)
        self._sock.close()


def status_body(sent: dict[str, Any], status: str, phone_number_id: str) -> dict[str, Any]:
    """Meta's status webhook (v24 shape) for a message the loopback WhatsApp accepted."""
    body = sent["body"]
    st: dict[str, Any] = {"id": sent["wamid"], "status": status, "timestamp": str(int(time.time())),
                          "recipient_id": body.get("to") or body.get("recipient")}
    if "biz_opaque_callback_data" in body:
        st["biz_opaque_callback_data"] = body["biz_opaque_callback_data"]
    return {"object": "whatsapp_business_account", "entry": [{"id": "102290129340398", "changes": [
        {"field": "messages", "value": {"messaging_product": "whatsapp",
                                        "metadata": {"display_phone_number": "15550783881",
                                                     "phone_number_id": phone_number_id},
                                        "statuses": [st]}}]}]}


class StatusPoster:
    """Posts ``statuses`` for every send handed to :meth:`sent` to ``url`` (``/webhook`` of an ingress), signed."""

    def __init__(self, url: str, *, app_secret: str, statuses: tuple[str, ...] = ("sent", "delivered"),
                 retries: int = 20) -> None:
        self.url = f"{url}/webhook"
        self.secret = app_secret.encode()
        self.statuses = statuses
        self.retries = retries
        self.posted = 0  # POSTs answered 200
        self.refused = 0  # POSTs answered otherwise (retried)
        self.lost = 0  # statuses given up on after ``retries``
        self._queue: queue.Queue[tuple[dict[str, Any], str] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> StatusPoster:
        self._thread.start()
        return self

    def sent(self, record: dict[str, Any]) -> None:
        """A send the loopback WhatsApp accepted (its recorded dict: path, body, wamid): its statuses will follow."""
        phone = str(record.get("path", "")).strip("/").split("/")[-2:-1] or ["1"]
        for status in self.statuses:
            self._queue.put((status_body(record, status, phone[0]), status))

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until every status handed over so far was posted (or given up on)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self._queue.unfinished_tasks

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(10)

    def _run(self) -> None:
        with httpx.Client(timeout=10) as http:
            while (item := self._queue.get()) is not None:
                body, _ = item
                raw = json.dumps(body).encode()  # as Meta sends it: the signature is over these bytes
                signature = "sha256=" + hmac.new(self.secret, raw, hashlib.sha256).hexdigest()
                for attempt in range(self.retries):
                    try:
                        r = http.post(self.url, content=raw, headers={"Content-Type": "application/json",
                                                                      "X-Hub-Signature-256": signature})
                        if r.status_code == 200:
                            self.posted += 1
                            break
                        self.refused += 1
                    except httpx.HTTPError:
                        self.refused += 1
                    time.sleep(min(2.0, 0.1 * 2 ** attempt))
                else:
                    self.lost += 1
                self._queue.task_done()
            self._queue.task_done()
