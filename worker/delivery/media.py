"""Fetching a photo a player sent, through the WhatsApp Cloud API's media endpoint.

Two GETs, both with the access token: ``{base}/{media_id}`` answers JSON (``url``, ``mime_type``, ``sha256``,
``file_size``); then the ``url`` answers the bytes. The size is bounded twice: the declared ``file_size`` and
``Content-Length`` are checked before reading, and the body is read in chunks and abandoned as soon as it passes
the limit, so a server that lies about the size (or sends no size) cannot make the worker read more.

Errors are classified as for sends (:func:`worker.delivery.whatsapp.classify_error`, by ``error.code`` first):
what can pass raises :class:`~worker.errors.MediaUnavailableError`, the rest
:class:`~worker.errors.MediaRejectedError`.
"""

from __future__ import annotations

import re
import time
from typing import Any

import httpx

from worker.conversation.model import Attachment
from worker.delivery.whatsapp import DEFAULT_BASE_URL, classify_error
from worker.errors import MediaRejectedError, MediaUnavailableError
from worker.httppool import ClientPool, single_connection, tls_context

PROVIDER = "whatsapp-media"
# Cloud API media ids are digits; allow the characters ids of other deployments use, nothing that could change
# the path of the request (the id comes from a webhook, i.e. from outside).
_MEDIA_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,256}$")
_CHUNK = 64 * 1024


class CloudMediaFetcher:
    """``fetch(media_id) -> Attachment`` over the Cloud API (see the module docstring).

    ``timeout`` is each read's and ``deadline`` the whole fetch's (seconds): a server that drips bytes slowly
    cannot hold a turn longer than that. Each GET leases a client from a pool (:mod:`worker.httppool`); the API and
    the download host (another origin) have a pool each, so both keep warm connections.
    """

    def __init__(self, base_url: str = DEFAULT_BASE_URL, access_token: str = "", max_bytes: int = 5 * 1024 * 1024,
                 *, timeout: float = 15.0, connect_timeout: float = 5.0, deadline: float = 60.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.max_bytes = max_bytes
        self.deadline = deadline
        headers = {"Authorization": f"Bearer {access_token}"}

        def client() -> httpx.Client:
            return httpx.Client(timeout=httpx.Timeout(timeout, connect=connect_timeout), headers=headers,
                                limits=single_connection(), verify=tls_context(), transport=transport,
                                follow_redirects=True)  # httpx drops the token on a redirect to another origin

        self._api = ClientPool(client)
        self._download = ClientPool(client)

    def fetch(self, media_id: str) -> Attachment:
        """The photo's bytes and MIME type; raises :class:`MediaRejectedError` or :class:`MediaUnavailableError`."""
        if not _MEDIA_ID.match(media_id):
            raise MediaRejectedError(f"media id {media_id[:80]!r} is not a Cloud API id", reason="bad_id")
        started = time.monotonic()
        info = self._info(media_id)
        url, mime, size = info.get("url"), info.get("mime_type"), info.get("file_size")
        if not isinstance(url, str) or not url.startswith(("https://", "http://")) or not isinstance(mime, str):
            raise MediaRejectedError("the media endpoint answered without a url or mime_type", reason="bad_answer")
        mime = mime.split(";")[0].strip().lower()
        if not mime.startswith("image/"):
            raise MediaRejectedError(f"media {media_id} is {mime}, not an image", reason="not_image")
        if isinstance(size, int | str) and str(size).isdigit() and int(size) > self.max_bytes:
            raise MediaRejectedError(f"media {media_id} is {size} bytes; the limit is {self.max_bytes}",
                                     reason="too_large")
        data = self._download_bounded(url, media_id, started)
        return Attachment(mime_type=mime, data=data)

    def _info(self, media_id: str) -> dict[str, Any]:
        try:
            with self._api.lease() as client:
                response = client.get(f"{self.base_url}/{media_id}")
                _raise_for_status(response, media_id)
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

    def _download_bounded(self, url: str, media_id: str, started: float) -> bytes:
        chunks: list[bytes] = []
        total = 0
        try:
            with self._download.lease() as client, client.stream("GET", url) as response:
                _raise_for_status(response, media_id, streamed=True)
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > self.max_bytes:
                    raise _too_large(media_id, f"Content-Length {declared}", self.max_bytes)
                for chunk in response.iter_bytes(_CHUNK):
                    total += len(chunk)
                    if total > self.max_bytes:  # stop reading: leaving the block closes the connection
                        raise _too_large(media_id, f"more than {self.max_bytes} bytes served", self.max_bytes)
                    if time.monotonic() - started > self.deadline:
                        raise MediaUnavailableError(f"media {media_id} took over {self.deadline} s to download",
                                                    provider=PROVIDER)
                    chunks.append(chunk)
        except httpx.TimeoutException as exc:
            raise MediaUnavailableError(f"media download timed out: {exc}", provider=PROVIDER) from exc
        except httpx.HTTPError as exc:
            raise MediaUnavailableError(f"media download failed: {exc}", provider=PROVIDER) from exc
        return b"".join(chunks)


def _too_large(media_id: str, what: str, limit: int) -> MediaRejectedError:
    return MediaRejectedError(f"media {media_id}: {what}; the limit is {limit}", reason="too_large")


def _raise_for_status(response: httpx.Response, media_id: str, *, streamed: bool = False) -> None:
    """Nothing for a 2xx; else the typed error (by ``error.code`` when the body has one, else by status)."""
    if response.is_success:
        return
    payload = None
    if not streamed:  # a streamed download's error body is not read: it could be as large as the server likes
        try:
            payload = response.json()
        except ValueError:
            pass
    err = classify_error(response.status_code, payload, response.headers)
    text = f"media {media_id}: {err.message}"
    if err.retryable:
        raise MediaUnavailableError(text, provider=PROVIDER, status=response.status_code,
                                    retry_after=getattr(err, "retry_after", None))
    raise MediaRejectedError(text, reason="refused", status=response.status_code)
