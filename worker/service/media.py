"""Preparing a player's message for the turn: a photo becomes a picture the model sees, or its caption, or a
short answer.

The drainer calls :meth:`MediaPreparer.prepare` for each ``message`` envelope before the turn. Per photo:

- the model reads images and a fetcher is configured (WhatsApp credentials): fetch it; the turn gets a user
  message with the media reference and caption, and the bytes as an attachment (never stored);
- otherwise, or when the fetch is refused for good (too large, not an image, an expired id): the caption alone,
  marked so the model knows a photo came that it cannot see; without a caption, a notice (the configured short
  answer) instead of a turn;
- a fetch that can pass (timeout, 5xx, throttling) raises :class:`~worker.errors.MediaUnavailableError`, which the
  drain retries as it does a model outage (it is a :class:`~worker.errors.ModelUnavailableError`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from worker import metrics
from worker.conversation import messages as msgs
from worker.conversation.messages import MediaRef, Message
from worker.conversation.model import Attachment
from worker.envelopes import Envelope
from worker.errors import InvalidMessageError, MediaRejectedError, MediaUnavailableError
from worker.settings import Settings

log = logging.getLogger("parley.service")

# What the model reads for a photo it cannot see, before the caption.
UNSEEN_CAPTION_PREFIX = "[The player sent a photo you cannot see, with this caption:] "
DEFAULT_UNSUPPORTED_REPLY: str = Settings.model_fields["unsupported_reply"].default


class Fetcher(Protocol):
    """Gets a photo's bytes by media id (:class:`worker.delivery.media.CloudMediaFetcher`)."""

    def fetch(self, media_id: str) -> Attachment: ...


@dataclass(frozen=True)
class Prepared:
    """Either ``message`` (the user message for the turn) with ``attachment`` (``(media id, Attachment)`` when the
    model is to see a picture), or ``notice`` (the short answer to send instead of a turn)."""

    message: Message | None = None
    attachment: tuple[str, Attachment] | None = None
    notice: str | None = None


class MediaPreparer:
    """Turns a ``message`` envelope into what the turn needs (see the module docstring)."""

    def __init__(self, fetcher: Fetcher | None = None, reads_images: bool = False,
                 unsupported_reply: str = DEFAULT_UNSUPPORTED_REPLY) -> None:
        self.fetcher = fetcher
        self.reads_images = reads_images
        self.unsupported_reply = unsupported_reply

    def prepare(self, env: Envelope) -> Prepared:
        """What the turn for ``env`` gets. Raises :class:`MediaUnavailableError` when a fetch failed in a way that
        can pass (retry the input later), :class:`InvalidMessageError` for an envelope that is not a message."""
        if env.kind != "message":
            raise InvalidMessageError(f"only a message is prepared for a turn, not a {env.kind}")
        caption = env.text or ""
        if env.media is None:
            return Prepared(message=msgs.user(caption))
        if not self.reads_images or self.fetcher is None:
            return self._unseen(env, caption, "model" if not self.reads_images else "no_fetcher")
        try:
            picture = self.fetcher.fetch(env.media.id)
        except MediaRejectedError as exc:
            log.warning("photo not fetched; answering without it", extra={
                "conversation_id": env.conversation_id, "message_id": env.message_id, "reason": exc.reason,
                "error": exc.message})
            return self._unseen(env, caption, exc.reason)
        except MediaUnavailableError:
            metrics.MEDIA.labels("retry", "unavailable").inc()
            raise
        metrics.MEDIA.labels("attached", "").inc()
        ref = MediaRef(id=env.media.id, mime_type=picture.mime_type)
        return Prepared(message=msgs.user(caption, media=ref), attachment=(env.media.id, picture))

    def _unseen(self, env: Envelope, caption: str, reason: str) -> Prepared:
        """The caption alone, marked as a photo's; without a caption, the short answer."""
        if caption.strip():
            metrics.MEDIA.labels("caption", reason).inc()
            return Prepared(message=msgs.user(UNSEEN_CAPTION_PREFIX + caption.strip()))
        metrics.MEDIA.labels("notice", reason).inc()
        return Prepared(notice=self.unsupported_reply)
