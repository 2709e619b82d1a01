"""Fetching a photo a player sent, through the WhatsApp Cloud API's media endpoint.

Two GETs, both with the access token: ``{base}/{media_id}`` answers JSON (``url``, ``mime_type``, ``sha256``,
``file_size``); then the ``url`` answers the bytes. The size is bounded twice: the declared ``file_size`` and
``Content-Length`` are checked before reading, and the body is read in chunks and abandoned as soon as it passes
the limit, so a server that lies about the size (or sends no size) cannot make the worker read more.

Errors are classified as for sends (:func:`worker.channels.whatsapp.classify_error`, by ``error.code`` first):
what can pass raises :class:`~worker.errors.MediaUnavailableError`, the rest
:class:`~worker.errors.MediaRejectedError`; a rejected access token (190, or a 401 without a code) raises
:class:`~worker.errors.MediaTokenError`, which the drain holds until the token works (and
:mod:`worker.channels.token` raises the alarm).

Where the token goes: the id must be a media id (:func:`worker.channels.ids.is_media_id`, checked before any
request), so ``{base}/{media_id}`` stays under the configured API base; every request of the API client (redirects
included) must stay on the base's origin, and every request of the download (redirects included) must go over
https to a host of :class:`MediaHosts` (Meta's media host by default). Anything else is refused before it is sent.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from worker.channels.ids import is_media_id
from worker.channels.token import TOKEN, TokenHealth
from worker.channels.whatsapp import DEFAULT_BASE_URL, classify_error
from worker.conversation.model import Attachment
from worker.errors import DeliveryError, MediaRejectedError, MediaTokenError, MediaUnavailableError, WhatsAppTokenError
from worker.http.pool import ClientPool, single_connection, tls_context

PROVIDER = "whatsapp-media"
_CHUNK = 64 * 1024
#: Where Meta serves media downloads (the ``url`` the media endpoint answers).
DEFAULT_MEDIA_HOSTS = ("lookaside.fbsbx.com",)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class MediaHosts:
    """The hosts a media download may go to (and so receive the access token): exact names, or ``*.example.com``
    for the subdomains of ``example.com``. Only over https; ``allow_http`` (tests with a loopback stand-in) lets
    plain http through to a loopback address only, never to anything else."""

    hosts: tuple[str, ...] = DEFAULT_MEDIA_HOSTS
    allow_http: bool = False

    @classmethod
    def of(cls, hosts: Iterable[str], allow_http: bool = False) -> MediaHosts:
        return cls(tuple(h.strip().lower().rstrip(".") for h in hosts if h.strip()), allow_http)

    def allows(self, url: httpx.URL) -> bool:
        host = url.host.lower().rstrip(".")
        if url.scheme != "https" and not (url.scheme == "http" and self.allow_http and _loopback(host)):
            return False
        return any(host == h or (h.startswith("*.") and host.endswith(h[1:])) for h in self.hosts)


def _guard(allowed: Callable[[httpx.URL], bool], what: str) -> Callable[[httpx.Request], None]:
    """An httpx request hook: refuse (before anything is sent) a request, first or redirected, to a URL that is
    not ``allowed``."""

    def check(request: httpx.Request) -> None:
        if not allowed(request.url):
            raise MediaRejectedError(f"refused to send the access token to {request.url.scheme}://"
                                     f"{request.url.host} ({what})", reason="bad_host")

    return check


class CloudMediaFetcher:
    """``fetch(media_id) -> Attachment`` over the Cloud API (see the module docstring).

    ``timeout`` is each read's and ``deadline`` the whole fetch's (seconds): a server that drips bytes slowly
    cannot hold a turn longer than that. Each GET leases a client from a pool (:mod:`worker.http.pool`); the API and
    the download host (another origin) have a pool each, so both keep warm connections.
    """

    def __init__(self, base_url: str = DEFAULT_BASE_URL, access_token: str = "", max_bytes: int = 5 * 1024 * 1024,
                 *, timeout: float = 15.0, connect_timeout: float = 5.0, deadline: float = 60.0,
                 transport: httpx.BaseTransport | None = None, hosts: MediaHosts | None = None,
                 token: TokenHealth | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.max_bytes = max_bytes
        self.deadline = deadline
        self.hosts = hosts or MediaHosts()
        self.token = token or TOKEN
        headers = {"Authorization": f"Bearer {access_token}"}
        api = httpx.URL(self.base_url)

        def on_api_origin(url: httpx.URL) -> bool:
            return (url.scheme, url.host, url.port) == (api.scheme, api.host, api.port)

        def client(allowed: Callable[[httpx.URL], bool], what: str) -> httpx.Client:
            return httpx.Client(timeout=httpx.Timeout(timeout, connect=connect_timeout), headers=headers,
                                limits=single_connection(), verify=tls_context(), transport=transport,
                                follow_redirects=True, event_hooks={"request": [_guard(allowed, what)]})

        self._api = ClientPool(lambda: client(on_api_origin, "not the API's origin"))
        self._download = ClientPool(lambda: client(self.hosts.allows, "not an allowed media host over https"))

    def fetch(self, media_id: str, max_bytes: int | None = None) -> Attachment:
        """The photo's bytes and MIME type; raises :class:`MediaRejectedError`, :class:`MediaUnavailableError` or
        :class:`MediaTokenError`. ``max_bytes`` lowers the size limit for this fetch (what is left of a turn's)."""
        if not is_media_id(media_id):
            raise MediaRejectedError(f"media id {media_id[:80]!r} is not a Cloud API id", reason="bad_id")
        limit = min(self.max_bytes, max_bytes) if max_bytes is not None else self.max_bytes
        try:
            return self._fetch(media_id, limit)
        except MediaRejectedError as exc:
            if exc.reason != "too_large" or limit >= self.max_bytes:
                raise
            # Not too large for a photo: too large for what is left of the caller's (a turn's) budget.
            raise MediaRejectedError(f"{exc.message} (what is left of the turn's photo budget)",
                                     reason="turn_budget") from exc

    def _fetch(self, media_id: str, limit: int) -> Attachment:
        started = time.monotonic()
        info = self._info(media_id)
        url, mime, size = info.get("url"), info.get("mime_type"), info.get("file_size")
        if not isinstance(url, str) or not isinstance(mime, str):
            raise MediaRejectedError("the media endpoint answered without a url or mime_type", reason="bad_answer")
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL:
            raise MediaRejectedError("the media endpoint answered a url that does not parse",
                                     reason="bad_answer") from None
        mime = mime.split(";")[0].strip().lower()
        if not mime.startswith("image/"):
            raise MediaRejectedError(f"media {media_id} is {mime}, not an image", reason="not_image")
        if isinstance(size, int | str) and str(size).isdigit() and int(size) > limit:
            raise _too_large(media_id, f"{size} bytes", limit)
        data = self._download_bounded(parsed, media_id, started, limit)
        return Attachment(mime_type=mime, data=data)

    def _info(self, media_id: str) -> dict[str, Any]:
        try:
            with self._api.lease() as client:
                response = client.get(f"{self.base_url}/{media_id}")
                self._raise_for_status(response, media_id)
                body = response.json()
        except httpx.TimeoutException as exc:
            raise MediaUnavailableError(f"media endpoint timed out: {exc}", provider=PROVIDER) from exc
        except httpx.HTTPError as exc:
            raise MediaUnavailableError(f"media endpoint unreachable: {exc}", provider=PROVIDER) from exc
        except ValueError:
            raise MediaRejectedError("the media endpoint answered something other than JSON",
                                     reason="bad_answer") from None
        if not isinstance(body, dict):
            raise MediaRejectedError("the media endpoint answered JSON that is not an object", reason="bad_answer")
        return body

    def _download_bounded(self, url: httpx.URL, media_id: str, started: float, limit: int) -> bytes:
        chunks: list[bytes] = []
        total = 0
        try:
            with self._download.lease() as client, client.stream("GET", url) as response:
                self._raise_for_status(response, media_id, streamed=True)
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > limit:
                    raise _too_large(media_id, f"Content-Length {declared}", limit)
                for chunk in response.iter_bytes(_CHUNK):
                    total += len(chunk)
                    if total > limit:  # stop reading: leaving the block closes the connection
                        raise _too_large(media_id, f"more than {limit} bytes served", limit)
                    if time.monotonic() - started > self.deadline:
                        raise MediaUnavailableError(f"media {media_id} took over {self.deadline} s to download",
                                                    provider=PROVIDER)
                    chunks.append(chunk)
        except httpx.TimeoutException as exc:
            raise MediaUnavailableError(f"media download timed out: {exc}", provider=PROVIDER) from exc
        except httpx.HTTPError as exc:
            raise MediaUnavailableError(f"media download failed: {exc}", provider=PROVIDER) from exc
        return b"".join(chunks)

    def _raise_for_status(self, response: httpx.Response, media_id: str, *, streamed: bool = False) -> None:
        """Nothing for a 2xx (the token was accepted); else the typed error (by ``error.code`` when the body has
        one, else by status)."""
        if response.is_success:
            self.token.accepted()
            return
        payload = None
        if not streamed:  # a streamed download's error body is not read: it could be as large as the server likes
            try:
                payload = response.json()
            except ValueError:
                pass
        _raise_classified(classify_error(response.status_code, payload, response.headers), response, media_id,
                          self.token)


def _too_large(media_id: str, what: str, limit: int) -> MediaRejectedError:
    return MediaRejectedError(f"media {media_id}: {what}; the limit is {limit}", reason="too_large")


def _raise_classified(err: DeliveryError, response: httpx.Response, media_id: str, token: TokenHealth) -> None:
    text = f"media {media_id}: {err.message}"
    if isinstance(err, WhatsAppTokenError):
        token.refused("media", text)
        raise MediaTokenError(text, provider=PROVIDER, status=response.status_code)
    if err.retryable:
        raise MediaUnavailableError(text, provider=PROVIDER, status=response.status_code,
                                    retry_after=getattr(err, "retry_after", None))
    raise MediaRejectedError(text, reason="refused", status=response.status_code)
