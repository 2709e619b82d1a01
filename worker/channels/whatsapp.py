"""The WhatsApp Cloud API sender, and the classification of its errors.

Errors are classified by ``error.code``, not by HTTP status: Meta documents 400 for throttling codes
(130429, 131056) in current revisions and 429 in older ones. Throttling, transient and 5xx failures are
retryable; a message outside the 24-hour window (131047), an undeliverable recipient (131026) or an invalid
parameter (100) are permanent. A rejected access token (190, or a 401 without a code) is neither: it is
:class:`~worker.errors.WhatsAppTokenError`, which holds deliveries until the token works (see
:mod:`worker.channels.token`).

A send that timed out once the request was on its way (a read or write timeout), or that was answered 200 without a
message id, may have reached Meta: it raises :class:`~worker.errors.SendOutcomeUnknownError`, and the deliverer
treats the part as one a crash left in flight. A connect or pool timeout never sent anything: plainly retryable.

Replies go through :meth:`WhatsAppSender.send_reply`, which keeps the 24-hour customer-service window (see
:mod:`worker.channels.window`): outside it, or when the API answers 131047, the rest of the reply goes as the
configured template (once), or the reply is refused with :class:`~worker.errors.OutsideWindowError`.

Read receipts and the typing indicator (:meth:`WhatsAppSender.mark_read`) are best effort: their failures are
logged and counted, never raised, and each step of the request (connect, send, answer) waits at most
:data:`RECEIPT_TIMEOUT`.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from worker import metrics
from worker.channels import rich
from worker.channels.channel import Pace, Sent, always
from worker.channels.token import TokenHealth, for_number
from worker.channels.window import ServiceWindow
from worker.envelopes.reply_parts import OutPart, render_all
from worker.errors import (
    DeliveryError,
    DeliveryPermanentError,
    DeliveryRetryableError,
    OptedOutError,
    OutsideWindowError,
    SendOutcomeUnknownError,
    WhatsAppTokenError,
)
from worker.http.pool import ClientPool, turn_client
from worker.http.retry_after import parse_retry_after

DEFAULT_BASE_URL = "https://graph.facebook.com/v21.0"
# A receipt slower than this (to connect, or to answer) is not worth waiting for: the indicator it would show
# lasts 25 s at most, and a reply may be waiting for it to finish (see Presence.settle).
RECEIPT_TIMEOUT = 3.0

log = logging.getLogger("parley.delivery")

# Throttling and transient conditions: retry with backoff.
RETRYABLE_CODES = frozenset({
    1, 2, 4, 17, 32, 613, 80007, 130429, 131000, 131016, 131048, 131056, 131057, 133004, 133016,
})
# "Error validating access token": expired, revoked or wrong. Held until the token works, never dead-lettered.
TOKEN_REJECTED = 190
# Codes that will fail the same way again: dead-letter with the reason.
PERMANENT_CODES = frozenset({
    0, 3, 10, 100, 200, 368, 131005, 131008, 131009, 131021, 131026, 131030, 131031, 131042, 131045,
    131047, 131049, 131051, 131052, 131053, 131062, 132000, 132001, 132005, 132007, 132012, 132015, 132016,
    133000, 133010,
})

# "Re-engagement message": more than 24 hours since the player's last message.
RE_ENGAGEMENT = 131047

_BSUID = re.compile(r"^[A-Z]{2}\.[0-9A-Za-z]+$")


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _retry_after(headers: Any) -> float | None:
    return parse_retry_after(headers.get("retry-after")) if headers is not None else None


def _error_object(body: Any) -> dict[str, Any] | None:
    if not isinstance(body, dict):
        return None
    err = body.get("error")
    if not isinstance(err, dict):
        return None
    # Some providers wrap Meta's error object (e.g. error.whatsappApiError); prefer Meta's own.
    for key in ("whatsappApiError", "whatsapp_api_error", "original_error"):
        inner = err.get(key)
        if isinstance(inner, dict) and "code" in inner:
            return inner
    return err


def classify_error(status: int, body: Any, headers: Any = None) -> DeliveryError:
    """Turn a failed send (HTTP status, parsed JSON body or None, headers) into a typed error."""
    err = _error_object(body)
    code = _int(err.get("code")) if err else None
    message = str(err.get("message", "")) if err else ""
    details = ""
    if err and isinstance(err.get("error_data"), dict):
        details = str(err["error_data"].get("details", ""))
    text = " — ".join(x for x in (message or f"HTTP {status}", details) if x)
    retry_after = _retry_after(headers)
    if code == TOKEN_REJECTED or (code is None and status == 401):
        return WhatsAppTokenError(text, code=code, status=status)
    if code is not None and code in RETRYABLE_CODES:
        return DeliveryRetryableError(text, code=code, status=status, retry_after=retry_after)
    if code is not None and code in PERMANENT_CODES:
        return DeliveryPermanentError(text, code=code, status=status)
    if err and err.get("is_transient") is True:
        return DeliveryRetryableError(text, code=code, status=status, retry_after=retry_after)
    if status == 429 or status >= 500:
        return DeliveryRetryableError(text, code=code, status=status, retry_after=retry_after)
    return DeliveryPermanentError(text, code=code, status=status)


def is_bsuid(recipient: str) -> bool:
    """Business-scoped user ids look like ``US.13491208655302741918``; phone numbers are digits (maybe ``+``)."""
    return bool(_BSUID.match(recipient))


def _addressed(recipient: str, message: dict[str, Any]) -> dict[str, Any]:
    """A send body: the message to ``recipient`` (a business-scoped user id goes in ``recipient``, a number in
    ``to``)."""
    body: dict[str, Any] = {"messaging_product": "whatsapp", "recipient_type": "individual", **message}
    body["recipient" if is_bsuid(recipient) else "to"] = recipient
    return body


class WhatsAppSender:
    """Sends text messages through the Cloud API: ``POST {base_url}/{phone_number_id}/messages``.

    Each send leases a client from the sender's pool (see :mod:`worker.http.pool`), so threads and greenlets share it.
    ``send_text`` returns the message id (wamid) or raises :class:`DeliveryRetryableError` /
    :class:`DeliveryPermanentError` / :class:`WhatsAppTokenError`. ``token`` is told of every send the API refused
    for the token and of every send it accepted (default: the process's state of ``phone_number_id``,
    :func:`~worker.channels.token.for_number`). ``pacer`` is the pace the number keeps, taken before every message it
    posts (:class:`~worker.channels.pacing.Pacer`, the limits the fleet shares; None: no pace).
    """

    def __init__(self, *, phone_number_id: str, access_token: str, base_url: str = DEFAULT_BASE_URL,
                 timeout: float = 15.0, connect_timeout: float = 5.0, transport: httpx.BaseTransport | None = None,
                 window: ServiceWindow | None = None, clock: Callable[[], float] = time.time,
                 token: TokenHealth | None = None, pacer: Pace | None = None) -> None:
        self.phone_number_id = phone_number_id
        self.pacer = pacer
        self.window = window or ServiceWindow()
        self.token = token or for_number(phone_number_id)
        self._clock = clock
        self.url = f"{base_url.rstrip('/')}/{phone_number_id}/messages"
        headers = {"Authorization": f"Bearer {access_token}", "Content-Type": "application/json"}
        self._clients = ClientPool(lambda: turn_client(
            timeout=httpx.Timeout(timeout, connect=connect_timeout), headers=headers, transport=transport))

    def body(self, recipient: str, text: OutPart, reply_to: str | None = None,
             callback_data: str | None = None) -> dict[str, Any]:
        """The send of one reply part: a text, or a rich part (:mod:`worker.channels.rich`) of any kind."""
        if isinstance(text, str):
            body = _addressed(recipient, {"type": "text", "text": {"preview_url": False, "body": text}})
        else:
            body = _addressed(recipient, rich.message(text, reply_to))
            reply_to = reply_to if rich.threads(text) else None
        if reply_to:
            body["context"] = {"message_id": reply_to}
        if callback_data:
            # Handed back unchanged in the message's sent/delivered/read status webhooks (at most 512 characters).
            body["biz_opaque_callback_data"] = callback_data
        return body

    def template_body(self, recipient: str, text: str, callback_data: str | None = None) -> dict[str, Any]:
        """The send of the configured template, its parameter filled from ``text`` (the reply) as configured."""
        if self.window.template is None:
            raise OutsideWindowError("no template is configured for replies outside the customer-service window")
        body = _addressed(recipient, {"type": "template", "template": self.window.template.payload(text)})
        if callback_data:
            body["biz_opaque_callback_data"] = callback_data
        return body

    def send_reply(self, recipient: str, parts: Sequence[OutPart], *, reply_to: str | None,
                   last_inbound: float | None, callback_data: str | None = None,
                   templates: Callable[[], bool] = always) -> Sent:
        """Send ``parts[0]`` within the customer-service window; outside it (known from ``last_inbound``, or from a
        131047 answer) send the rest of the reply as the template, once, or raise :class:`OutsideWindowError`
        (before any call when the window was known to be closed). Each call keeps the pace. ``callback_data``
        names the part (the template carries the first part's: a crash right after it may resend the rest).
        ``templates()`` False (the player opted out; asked only then): no template, :class:`OptedOutError` instead."""
        if not self.window.is_open(last_inbound, self._clock()):
            return self._outside_window(recipient, parts, why="window", callback_data=callback_data,
                                        templates=templates)
        try:
            return Sent(self._post(recipient, self.body(recipient, parts[0], reply_to, callback_data)))
        except DeliveryPermanentError as exc:
            if exc.code != RE_ENGAGEMENT:
                raise
            return self._outside_window(recipient, parts, why=str(RE_ENGAGEMENT), cause=exc,
                                        callback_data=callback_data, templates=templates)

    def _outside_window(self, recipient: str, parts: Sequence[OutPart], *, why: str,
                        cause: DeliveryPermanentError | None = None, callback_data: str | None = None,
                        templates: Callable[[], bool] = always) -> Sent:
        code = cause.code if cause is not None else None
        if self.window.template is not None and not templates():
            metrics.OPTED_OUT_SENDS.labels("template").inc()
            raise OptedOutError("outside the customer-service window, and the player opted out: no template",
                                code=code, status=cause.status if cause is not None else None) from cause
        if self.window.template is None:
            metrics.OUTSIDE_WINDOW.labels("dead", why).inc()
            seen = "the API answered 131047" if cause is not None else "the player's last message is older"
            raise OutsideWindowError(f"outside the customer-service window ({seen}) and no template is configured",
                                     code=code, status=cause.status if cause is not None else None) from cause
        # The template's own errors (a name Meta does not know, throttling) propagate as they are: no second try.
        # Rich parts (interactive ones cannot go outside the window) stand in the parameter as the text the state has.
        wamid = self._post(recipient, self.template_body(recipient, render_all(parts), callback_data))
        metrics.OUTSIDE_WINDOW.labels("template", why).inc()
        return Sent(wamid, rest=True)

    def send_text(self, recipient: str, text: str, *, reply_to: str | None = None,
                  callback_data: str | None = None) -> str:
        return self._post(recipient, self.body(recipient, text, reply_to, callback_data))

    def _post(self, recipient: str, body: dict[str, Any]) -> str:
        """Send one message to ``recipient`` once the pace lets it go (:class:`RetryLater` when that is far off);
        its wamid, or the classified error."""
        if self.pacer is not None:
            self.pacer.admit(recipient)
        try:
            with self._clients.lease() as client:
                response = client.post(self.url, json=body)
        except (httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise DeliveryRetryableError(f"WhatsApp API timed out before the send: {exc}") from exc
        except httpx.TimeoutException as exc:
            # The request may have reached Meta: the deliverer settles it as a crash would have left it.
            raise SendOutcomeUnknownError(f"WhatsApp API timed out after the send went out: {exc}") from exc
        except httpx.HTTPError as exc:
            raise DeliveryRetryableError(f"WhatsApp API unreachable: {exc}") from exc
        try:
            payload = response.json()
        except ValueError:
            payload = None
        if response.status_code != 200:
            err = classify_error(response.status_code, payload, response.headers)
            if isinstance(err, WhatsAppTokenError):
                err.refusals = self.token.refused("send", str(err))
            elif err.code is not None and response.status_code < 500:
                self.token.accepted()  # Meta's own error about the message: the token passed its check
            raise err
        self.token.accepted()
        try:
            return str(payload["messages"][0]["id"])  # type: ignore[index]
        except (TypeError, KeyError, IndexError):
            # 200 without a message id: we cannot tell whether it was accepted. Resending may duplicate.
            raise SendOutcomeUnknownError("WhatsApp API answered 200 without a message id", status=200) from None

    def mark_read(self, message_id: str, *, typing: bool) -> None:
        """Mark an inbound message (and, on WhatsApp's side, the earlier ones of the chat) read; with ``typing``
        also show the typing indicator, which lasts until the next reply or 25 s. Never raises for the API's
        failures: they are logged at warning level and counted in ``parley_presence_total`` (a rejected token only
        by the token's alarm, once: every turn sends a receipt)."""
        body: dict[str, Any] = {"messaging_product": "whatsapp", "status": "read", "message_id": message_id}
        if typing:
            body["typing_indicator"] = {"type": "text"}
        try:
            with self._clients.lease() as client:
                response = client.post(self.url, json=body, timeout=RECEIPT_TIMEOUT)
                status = response.status_code
                try:
                    payload = response.json()
                except ValueError:
                    payload = None
        except httpx.TimeoutException as exc:
            self._receipt_failed("timeout", message_id, f"timed out: {exc}")
            return
        except httpx.HTTPError as exc:
            self._receipt_failed("unreachable", message_id, f"{type(exc).__name__}: {exc}")
            return
        if status != 200:
            err = classify_error(status, payload, None)
            if isinstance(err, WhatsAppTokenError):  # the token's alarm says it once, not a line per receipt
                metrics.PRESENCE.labels("rejected").inc()
                self.token.refused("receipt", str(err))
                return
            self._receipt_failed("rejected", message_id, str(err), code=err.code, status=status)
            return
        self.token.accepted()
        metrics.PRESENCE.labels("sent").inc()

    @staticmethod
    def _receipt_failed(outcome: str, message_id: str, error: str, **extra: Any) -> None:
        metrics.PRESENCE.labels(outcome).inc()
        log.warning("read receipt not sent", extra={"message_id": message_id, "outcome": outcome, "error": error,
                                                    **extra})

    def close(self) -> None:
        self._clients.close()
