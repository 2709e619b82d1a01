"""A loopback server standing in for the WhatsApp Cloud API send endpoint and its media endpoints.

Records every send (path, headers, JSON body) and answers success with a fresh wamid, or scripted errors;
``on_sent`` runs after a send is recorded and before it is answered.
Throughput: :meth:`FakeWhatsApp.limit` makes it answer 130429 when the sends of one phone number exceed a rate, and
131056 when those to one recipient exceed a pair rate, counted over a sliding window as Meta would see them arrive.
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

from tests.support.loopback import LoopbackPeer, LoopbackServer

#: The settings that let a worker download photos from this stand-in (plain http to 127.0.0.1): an explicit test
#: configuration, never a default (the default is https to Meta's media host only).
MEDIA_SETTINGS: dict[str, Any] = {"media_hosts": ["127.0.0.1"], "media_allow_http": True}
#: The same, as the environment of a worker process.
MEDIA_ENV = {"PARLEY_MEDIA_HOSTS": "127.0.0.1", "PARLEY_MEDIA_ALLOW_HTTP": "true"}


@dataclass(frozen=True)
class SentPart:
    """One accepted send, named by the callback data Parley sends every reply part with
    (``<conversation>|<reply id>|<part>``); ``reply_id`` and ``part`` are None for a send without it."""

    reply_id: str | None
    part: int | None
    text: str


@dataclass
class RateLimit:
    """At most ``per_second * window + allowance`` accepted sends in any ``window`` seconds, else ``code``."""

    per_second: float
    allowance: int
    code: int
    window: float = 1.0

    def exceeded(self, arrivals: deque[float], now: float) -> bool:
        while arrivals and arrivals[0] <= now - self.window:
            arrivals.popleft()
        return len(arrivals) + 1 > self.per_second * self.window + self.allowance


@dataclass
class FakeMedia:
    """A picture behind the media endpoints, and how the fake misbehaves about it.

    ``declared_size``: the ``file_size`` the JSON claims (default: the truth). ``stream``: send the bytes without a
    Content-Length, in 64 KiB chunks, ``repeat`` times over (a server that lies and never stops).
    ``content_length``: the header to send instead of the truth. ``info_error`` / ``download_error``:
    ``(status, payload)`` to answer instead. ``delay``: seconds before the download answers. ``url``: the download
    URL the JSON names instead of this server's. ``redirect``: answer the download (or, with an ``info_error`` of
    302, the JSON request) with a 302 to this URL. ``token``: the access token its requests must carry (default:
    the fake's ``access_token``), as a picture sent to one business number of several is fetched with that number's.
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
    url: str | None = None
    redirect: str | None = None
    token: str | None = None


class FakeWhatsApp(LoopbackPeer):
    def __init__(self, *, access_token: str = "test-token") -> None:
        self.sent: list[dict[str, Any]] = []
        self.received: list[dict[str, Any]] = []  # the body of every send, whatever it was answered
        self.limits: tuple[RateLimit | None, RateLimit | None] = (None, None)  # (phone number, pair); see limit()
        self.throttled: list[tuple[int, str]] = []  # (code, recipient) of each send refused by the limits
        self.arrivals: list[float] = []  # monotonic time of each accepted send
        self._by_number: dict[str, deque[float]] = {}
        self._by_pair: dict[tuple[str, str], deque[float]] = {}
        self.headers: list[dict[str, str]] = []
        self.errors: deque[tuple[int, dict[str, Any], dict[str, str]]] = deque()
        self.delay = 0.0
        self.fault: Any = None  # callable(body) -> (status, payload, headers) | None
        # callable(sent) -> None, run once a send is accepted and recorded, before the answer goes back (so a hook
        # that kills the sending worker lands between the send and its sent mark); ``sent`` is the recorded dict
        self.on_sent: Any = None
        self.reads: list[dict[str, Any]] = []  # {"path", "body"} of each read receipt answered 200
        self.read_errors: deque[tuple[int, dict[str, Any], dict[str, str]]] = deque()
        self.read_fault: Any = None  # callable(body) -> (status, payload, headers) | None (None: drop the connection)
        self.lock = threading.Lock()
        self._ids = itertools.count(1)
        self.access_token = access_token
        self.media: dict[str, FakeMedia] = {}
        self.gets: list[tuple[str, dict[str, str]]] = []  # (path, headers) of every GET
        self.streamed = 0  # bytes the streamed downloads wrote before the client hung up
        self.streams_ended = 0  # streamed downloads over (whole, or cut off by the client): ``streamed`` is final
        # phone number id -> the token its sends must carry (a number not named here takes any token)
        self.send_tokens: dict[str, str] = {}
        self.http = LoopbackServer(self.answer, self.answer_get)

    @property
    def base_url(self) -> str:
        return f"{self.http.url}/v21.0"

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
            if self._wrong_token(path, headers):
                return 401, {"error": {"message": "Error validating access token", "type": "OAuthException",
                                       "code": 190, "fbtrace_id": "x"}}, {}
            injected = self.fault(body) if self.fault is not None else None
            if injected is not None:
                return injected
            refused = self._over_limit(path, body)
            if refused is not None:
                return refused
            wamid = f"wamid.out{next(self._ids)}"
            sent = {"path": path, "body": body, "wamid": wamid}
            self.sent.append(sent)
            self.headers.append(headers)
        if self.on_sent is not None:
            self.on_sent(sent)
        to = body.get("to") or body.get("recipient")
        return 200, {"messaging_product": "whatsapp", "contacts": [{"input": to, "wa_id": to}],
                     "messages": [{"id": wamid}]}, {}

    def _wrong_token(self, path: str, headers: dict[str, str]) -> bool:
        number = path.removeprefix("/v21.0/").split("/", 1)[0]
        wanted = self.send_tokens.get(number)
        return wanted is not None and headers.get("authorization") != f"Bearer {wanted}"

    def limit(self, *, per_second: float, allowance: int, pair_per_second: float = 0.0, pair_allowance: int = 0,
              window: float = 1.0) -> None:
        """Answer 130429 above ``per_second`` sends of one phone number, 131056 above ``pair_per_second`` sends to
        one recipient (0: no pair limit), each with ``allowance`` sends over the rate in any ``window`` seconds."""
        with self.lock:
            self.limits = (RateLimit(per_second, allowance, 130429, window),
                           RateLimit(pair_per_second, pair_allowance, 131056, window) if pair_per_second else None)

    def _over_limit(self, path: str, body: dict[str, Any]) -> tuple[int, Any, dict[str, str]] | None:
        """Called under the lock: the refusal of a send over a limit, or None (the send is counted)."""
        now = time.monotonic()
        number, pair = self.limits
        to = str(body.get("to") or body.get("recipient"))
        by_number = self._by_number.setdefault(path, deque())
        by_pair = self._by_pair.setdefault((path, to), deque())
        for limit, arrivals in ((number, by_number), (pair, by_pair)):
            if limit is not None and limit.exceeded(arrivals, now):
                self.throttled.append((limit.code, to))
                message = "Rate limit hit" if limit.code == 130429 else "pair rate limit hit"
                return 400, {"error": {"message": f"(#{limit.code}) {message}", "type": "OAuthException",
                                       "code": limit.code, "fbtrace_id": "x"}}, {}
        by_number.append(now)
        by_pair.append(now)
        self.arrivals.append(now)
        return None

    def busiest(self, window: float = 1.0) -> int:
        """The most sends accepted in any ``window`` seconds."""
        with self.lock:
            times = sorted(self.arrivals)
        best, first = 0, 0
        for last, t in enumerate(times):
            while times[first] <= t - window:
                first += 1
            best = max(best, last - first + 1)
        return best

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

    def parts_for(self, recipient: str) -> list[SentPart]:
        """The accepted sends to ``recipient``, in order, each naming the reply part it was."""
        from worker.envelopes.inputs import parse_part_callback

        out = []
        with self.lock:
            for s in self.sent:
                body = s["body"]
                if (body.get("to") or body.get("recipient")) != recipient:
                    continue
                ref = parse_part_callback(body.get("biz_opaque_callback_data"))
                text = body["text"]["body"] if "text" in body else str(body.get(body.get("type", ""), ""))
                out.append(SentPart(ref.reply_id if ref else None, ref.part if ref else None, text))
        return out

    # --- media ---------------------------------------------------------------------------------------------

    def add_media(self, media_id: str, data: bytes, mime_type: str = "image/jpeg", **faults: Any) -> FakeMedia:
        item = FakeMedia(data=data, mime_type=mime_type, **faults)
        with self.lock:
            self.media[media_id] = item
        return item

    def answer_get(self, path: str, headers: dict[str, str]) -> tuple[int, Any, dict[str, str]] | None:
        with self.lock:
            self.gets.append((path, headers))
        item = self.media.get(path.removeprefix("/download/").removeprefix("/v21.0/"))
        wanted = item.token if item is not None and item.token is not None else self.access_token
        if headers.get("authorization") != f"Bearer {wanted}":
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
            return item.info_error[0], item.info_error[1], {"Location": item.redirect} if item.redirect else {}
        return 200, {"messaging_product": "whatsapp", "url": item.url or f"{self.http.url}/download/{media_id}",
                     "mime_type": item.mime_type, "sha256": hashlib.sha256(item.data).hexdigest(),
                     "file_size": item.declared_size if item.declared_size is not None else len(item.data),
                     "id": media_id}, {}

    def _download(self, media_id: str) -> tuple[int, Any, dict[str, str]]:
        item = self.media.get(media_id)
        if item is None:
            return 404, b"not found", {}
        time.sleep(item.delay)
        if item.redirect is not None and item.info_error is None:
            return 302, b"", {"Location": item.redirect}
        if item.download_error is not None:
            return item.download_error[0], item.download_error[1], {}
        headers = {"Content-Type": item.mime_type}
        if item.stream:
            return 200, self._chunks(item), headers
        if item.content_length is not None:
            headers["Content-Length"] = item.content_length
        return 200, item.data, headers

    def _chunks(self, item: FakeMedia) -> Iterator[bytes]:
        try:
            for _ in range(item.repeat):
                for i in range(0, len(item.data), 65536):
                    chunk = item.data[i:i + 65536]
                    yield chunk
                    with self.lock:
                        self.streamed += len(chunk)
        finally:  # also when the handler drops the generator after the client hung up
            with self.lock:
                self.streams_ended += 1
