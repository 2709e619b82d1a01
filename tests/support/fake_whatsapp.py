"""A loopback server standing in for the WhatsApp Cloud API send endpoint and its media endpoints.

Records every send (path, headers, JSON body) and answers success with a fresh wamid, or scripted errors.
Read receipts and typing indicators (``"status": "read"`` bodies) are recorded apart, in ``reads``, and have their
own scripted errors (``fail_reads``, ``read_fault``), so that they never take an error meant for a send.
Media: :meth:`FakeWhatsApp.add_media` puts a picture behind ``GET {base}/{media_id}`` (the JSON with its ``url``)
and ``GET /download/{media_id}`` (the bytes), both requiring the access token; an unknown id answers 400 with
error code 100 as Meta does; per-item faults stand in for servers that lie, fail or hang.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.support.loopback import LoopbackServer


@dataclass
class FakeMedia:
    """A picture behind the media endpoints, and how the fake misbehaves about it.

    ``declared_size``: the ``file_size`` the JSON claims (default: the truth). ``stream``: send the bytes without a
    Content-Length, in 64 KiB chunks, ``repeat`` times over (a server that lies and never stops).
    ``content_length``: the header to send instead of the truth. ``info_error`` / ``download_error``:
    ``(status, payload)`` to answer instead. ``delay``: seconds before the download answers.
    """

    data: bytes
    mime_type: str = "image/jpeg"
    declared_size: int | None = None
    stream: bool = False
    repeat: int = 1
    content_length: str | None = None
    info_error: tuple[int, Any] | None = None
    download_error: tuple[int, Any] | None = None
    delay: float = 0.0


class FakeWhatsApp:
    def __init__(self, *, access_token: str = "test-token") -> None:
        self.sent: list[dict[str, Any]] = []
        self.received: list[dict[str, Any]] = []  # the body of every send, whatever it was answered
        self.headers: list[dict[str, str]] = []
        self.errors: deque[tuple[int, dict[str, Any], dict[str, str]]] = deque()
        self.delay = 0.0
        self.fault: Any = None  # callable(body) -> (status, payload, headers) | None
        self.reads: list[dict[str, Any]] = []  # {"path", "body"} of each read receipt answered 200
        self.read_errors: deque[tuple[int, dict[str, Any], dict[str, str]]] = deque()
        self.read_fault: Any = None  # callable(body) -> (status, payload, headers) | None (None: drop the connection)
        self.lock = threading.Lock()
        self._ids = itertools.count(1)
        self.access_token = access_token
        self.media: dict[str, FakeMedia] = {}
        self.gets: list[tuple[str, dict[str, str]]] = []  # (path, headers) of every GET
        self.streamed = 0  # bytes the streamed downloads wrote before the client hung up
        self.http = LoopbackServer(self.answer, self.answer_get)

    @property
    def base_url(self) -> str:
        return f"{self.http.url}/v21.0"

    def start(self) -> FakeWhatsApp:
        self.http.start()
        return self

    def stop(self) -> None:
        self.http.stop()

    def fail(self, code: int, status: int = 400, times: int = 1, message: str = "injected") -> None:
        for _ in range(times):
            self.errors.append((status, {"error": {"message": f"(#{code}) {message}", "type": "OAuthException",
                                                   "code": code, "fbtrace_id": "x"}}, {}))

    def fail_reads(self, code: int, status: int = 400, times: int = 1, message: str = "injected") -> None:
        for _ in range(times):
            self.read_errors.append((status, {"error": {"message": f"(#{code}) {message}", "type": "OAuthException",
                                                        "code": code, "fbtrace_id": "x"}}, {}))

    def answer(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any, dict[str, str]] | None:
        time.sleep(self.delay)
        if body.get("status") == "read":
            return self.answer_read(path, body)
        with self.lock:
            self.received.append(body)
            if self.errors:
                return self.errors.popleft()
            injected = self.fault(body) if self.fault is not None else None
            if injected is not None:
                return injected
            wamid = f"wamid.out{next(self._ids)}"
            self.sent.append({"path": path, "body": body, "wamid": wamid})
            self.headers.append(headers)
        to = body.get("to") or body.get("recipient")
        return 200, {"messaging_product": "whatsapp", "contacts": [{"input": to, "wa_id": to}],
                     "messages": [{"id": wamid}]}, {}

    def answer_read(self, path: str, body: dict[str, Any]) -> tuple[int, Any, dict[str, str]] | None:
        with self.lock:
            if self.read_errors:
                return self.read_errors.popleft()
            if self.read_fault is not None:
                return self.read_fault(body)  # type: ignore[no-any-return]
            self.reads.append({"path": path, "body": body})
        return 200, {"success": True}, {}

    def texts_for(self, recipient: str) -> list[str]:
        with self.lock:
            return [s["body"]["text"]["body"] for s in self.sent
                    if (s["body"].get("to") or s["body"].get("recipient")) == recipient]

    # --- media ---------------------------------------------------------------------------------------------

    def add_media(self, media_id: str, data: bytes, mime_type: str = "image/jpeg", **faults: Any) -> FakeMedia:
        item = FakeMedia(data=data, mime_type=mime_type, **faults)
        with self.lock:
            self.media[media_id] = item
        return item

    def answer_get(self, path: str, headers: dict[str, str]) -> tuple[int, Any, dict[str, str]] | None:
        with self.lock:
            self.gets.append((path, headers))
        if headers.get("authorization") != f"Bearer {self.access_token}":
            return 401, {"error": {"message": "Error validating access token", "type": "OAuthException",
                                   "code": 190, "fbtrace_id": "x"}}, {}
        if path.startswith("/download/"):
            return self._download(path.removeprefix("/download/"))
        media_id = path.removeprefix("/v21.0/")
        item = self.media.get(media_id)
        if item is None:
            return 400, {"error": {"message": "Unsupported get request. Object with ID does not exist",
                                   "type": "GraphMethodException", "code": 100, "fbtrace_id": "x"}}, {}
        if item.info_error is not None:
            return item.info_error[0], item.info_error[1], {}
        return 200, {"messaging_product": "whatsapp", "url": f"{self.http.url}/download/{media_id}",
                     "mime_type": item.mime_type, "sha256": hashlib.sha256(item.data).hexdigest(),
                     "file_size": item.declared_size if item.declared_size is not None else len(item.data),
                     "id": media_id}, {}

    def _download(self, media_id: str) -> tuple[int, Any, dict[str, str]]:
        item = self.media.get(media_id)
        if item is None:
            return 404, b"not found", {}
        time.sleep(item.delay)
        if item.download_error is not None:
            return item.download_error[0], item.download_error[1], {}
        headers = {"Content-Type": item.mime_type}
        if item.stream:
            return 200, self._chunks(item), headers
        if item.content_length is not None:
            headers["Content-Length"] = item.content_length
        return 200, item.data, headers

    def _chunks(self, item: FakeMedia) -> Iterator[bytes]:
        for _ in range(item.repeat):
            for i in range(0, len(item.data), 65536):
                chunk = item.data[i:i + 65536]
                yield chunk
                with self.lock:
                    self.streamed += len(chunk)
