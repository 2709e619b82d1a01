"""Delivery channels: where replies go.

A channel sends one text to one recipient and returns the provider's message id, or raises
:class:`~worker.errors.DeliveryRetryableError` / :class:`~worker.errors.DeliveryPermanentError`. A channel may
also implement :class:`ReadReceipts` (read marks and a typing indicator, best effort; see
:mod:`worker.service.presence`) and :class:`WindowedChannel` (a platform that lets free-form replies through only
for a while after the player's last message: WhatsApp; the console and webhook channels have no window).
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TextIO, runtime_checkable

import httpx

from worker.envelopes.reply_parts import OutPart, RichPart, part_json, render
from worker.errors import DeliveryPermanentError, DeliveryRetryableError


@runtime_checkable
class Channel(Protocol):
    """Sends one whole text message; returns the provider's message id.

    ``callback_data`` names the reply part (:func:`worker.envelopes.inputs.part_callback`); a channel whose provider hands
    such data back in its status webhooks (WhatsApp) sends it along, the others ignore it."""

    def send_text(self, recipient: str, text: str, *, reply_to: str | None = None,
                  callback_data: str | None = None) -> str: ...


@runtime_checkable
class RichChannel(Protocol):
    """Optional for a channel: sends a rich reply part (an image, a pin, buttons...) as such. A channel without it
    is sent the part's text rendering (:func:`worker.envelopes.reply_parts.render`) through ``send_text``."""

    def send_part(self, recipient: str, part: RichPart, *, reply_to: str | None = None,
                  callback_data: str | None = None) -> str: ...


@runtime_checkable
class ReadReceipts(Protocol):
    """Optional for a channel: tells the player their message was read and, with ``typing``, that an answer is
    being written. Best effort: it never raises for the provider's failures (a receipt is not worth a turn)."""

    def mark_read(self, message_id: str, *, typing: bool) -> None: ...


@dataclass(frozen=True)
class Sent:
    """One send of a windowed channel: the provider's message id, and whether it carried the rest of the reply
    (a template sent outside the window stands for every part left)."""

    message_id: str
    rest: bool = False


class Pace(Protocol):
    """The pace a sender keeps, which it owns (:class:`~worker.channels.pacing.Pacer`: the limits the fleet shares).
    ``admit(recipient)`` returns once the next send to ``recipient`` may go, having waited for it; a slot far off
    raises :class:`~worker.errors.RetryLater` instead (nothing sent, nothing taken)."""

    def admit(self, recipient: str) -> float: ...


def always() -> bool:
    """Templates allowed (the default of :meth:`WindowedChannel.send_reply`)."""
    return True


@runtime_checkable
class WindowedChannel(Protocol):
    """A channel whose free-form messages go through only within a window after the player's last message. It sends
    ``parts[0]``, or, outside the window, a template carrying every part left, or raises
    :class:`~worker.errors.OutsideWindowError` before any call when it has no template. ``last_inbound`` is when the
    player's last message was accepted (None: unknown). It keeps its own pace before each API call it makes.
    ``templates`` (asked only when a template would go) False: the player opted out, so no template goes
    (:class:`~worker.errors.OptedOutError`)."""

    def send_reply(self, recipient: str, parts: Sequence[OutPart], *, reply_to: str | None,
                   last_inbound: float | None, callback_data: str | None = None,
                   templates: Callable[[], bool] = always) -> Sent: ...


class ConsoleChannel:
    """Prints replies (used when no channel is configured)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def send_text(self, recipient: str, text: str, *, reply_to: str | None = None,
                  callback_data: str | None = None) -> str:
        with self._lock:
            number = next(self._ids)
            print(f"[reply to {recipient}] {text}", file=self.stream, flush=True)
        return f"console-{number}"

    def mark_read(self, message_id: str, *, typing: bool) -> None:
        """Nothing to show on a console."""


class WebhookChannel:
    """POSTs ``{"recipient", "text", "reply_to"}`` as JSON to a URL; a rich part also carries ``"part"`` (its JSON
    form, :func:`worker.envelopes.reply_parts.part_json`), ``text`` being its rendering. 2xx: sent (the id is the body's ``id``
    when it has one); 429 and 5xx: retryable; other 4xx: permanent."""

    def __init__(self, url: str, *, timeout: float = 10.0, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self._client = httpx.Client(timeout=timeout, headers=headers)
        self._ids = itertools.count(1)

    def send_text(self, recipient: str, text: str, *, reply_to: str | None = None,
                  callback_data: str | None = None) -> str:
        return self._post({"recipient": recipient, "text": text, "reply_to": reply_to})

    def send_part(self, recipient: str, part: RichPart, *, reply_to: str | None = None,
                  callback_data: str | None = None) -> str:
        return self._post({"recipient": recipient, "text": render(part), "reply_to": reply_to,
                           "part": part_json(part)})

    def _post(self, payload: dict[str, Any]) -> str:
        # The webhook contract has no status callbacks into Parley: ``callback_data`` has nowhere to come back.
        try:
            response = self._client.post(self.url, json=payload)
        except httpx.HTTPError as exc:
            raise DeliveryRetryableError(f"webhook unreachable: {exc}") from exc
        if response.status_code == 429 or response.status_code >= 500:
            raise DeliveryRetryableError(f"webhook answered {response.status_code}", status=response.status_code)
        if response.status_code >= 400:
            raise DeliveryPermanentError(f"webhook answered {response.status_code}: {response.text[:200]}",
                                         status=response.status_code)
        body: Any = None
        try:
            body = response.json()
        except ValueError:
            pass
        if isinstance(body, dict) and isinstance(body.get("id"), str):
            return str(body["id"])
        return f"webhook-{next(self._ids)}"

    def mark_read(self, message_id: str, *, typing: bool) -> None:
        """The webhook contract has no receipts: a receiver that wants them reads the inbound webhooks itself."""
