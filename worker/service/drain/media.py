"""Preparing a player's message for the turn: a photo becomes a picture the model sees, or its caption, or a
short answer.

The drainer calls :meth:`MediaPreparer.prepare` for each ``message`` envelope before the turn. Per photo:

- the model reads images and a fetcher is configured (WhatsApp credentials): fetch it; the turn gets a user
  message with the media reference and caption, and the bytes as an attachment (never stored);
- otherwise, or when the fetch is refused for good (too large, not an image, an expired id): the caption alone,
  marked so the model knows a photo came that it cannot see; without a caption, a notice (the configured short
  answer) instead of a turn;
- a fetch that can pass (timeout, 5xx, throttling) raises :class:`~worker.errors.MediaUnavailableError`, which the
  drain retries as it does a model outage (it is a :class:`~worker.errors.ModelUnavailableError`);
- a fetch refused for the access token raises :class:`~worker.errors.MediaTokenError`: the drain holds the input
  (:mod:`worker.service.drain.failures`) as it does for a rejected model key, never falling back to the caption for it.

One turn holds at most ``turn_max_bytes`` of photos (:class:`TurnPhotos`, one per turn): the photos past it are not
fetched, and the model reads that a photo came that could not be loaded (never a silent drop). While the model call
runs, the request's base64 and JSON copies add about four times the photos' bytes (measured with the OpenAI
provider), so the limit bounds a turn's memory to about five times itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from worker import metrics
from worker.conversation import messages as msgs
from worker.conversation.messages import MediaRef, Message
from worker.conversation.model import Attachment
from worker.envelopes.inputs import Envelope, InputKind
from worker.errors import InvalidMessageError, MediaRejectedError, MediaTokenError, MediaUnavailableError
from worker.settings import PhotoLimits, Webhook

log = logging.getLogger("parley.service")

# What the model reads for a photo it cannot see, before the caption.
UNSEEN_CAPTION_PREFIX = "[The player sent a photo you cannot see, with this caption:] "
DEFAULT_UNSUPPORTED_REPLY: str = Webhook().unsupported_reply
DEFAULT_TURN_MAX_BYTES: int = PhotoLimits().turn_max_bytes


class Fetcher(Protocol):
    """Gets a photo's bytes by media id (:class:`worker.channels.media_download.CloudMediaFetcher`), at most ``max_bytes``
    of them when given (else the fetcher's own limit)."""

    def fetch(self, media_id: str, max_bytes: int | None = None) -> Attachment: ...


class TurnPhotos:
    """What is left of one turn's photo bytes (``limit``); a turn runner keeps one for the turn."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    @property
    def left(self) -> int:
        return max(0, self.limit - self.held)


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
                 unsupported_reply: str = DEFAULT_UNSUPPORTED_REPLY,
                 turn_max_bytes: int = DEFAULT_TURN_MAX_BYTES,
                 fetcher_for: Callable[[str], Fetcher | None] | None = None) -> None:
        """``fetcher_for`` (several business numbers): the fetcher of a conversation's number, with its token, in
        place of the one ``fetcher``."""
        self.fetcher = fetcher
        self.fetcher_for = fetcher_for
        self.reads_images = reads_images
        self.unsupported_reply = unsupported_reply
        self.turn_max_bytes = turn_max_bytes

    def turn_photos(self) -> TurnPhotos:
        """The photo budget of one turn (pass it to every :meth:`prepare` of that turn)."""
        return TurnPhotos(self.turn_max_bytes)

    def prepare(self, env: Envelope, photos: TurnPhotos | None = None) -> Prepared:
        """What the turn for ``env`` gets; ``photos``: the turn's budget, which a fetched photo draws on (None:
        only the fetcher's own limit). Raises :class:`MediaUnavailableError` (or :class:`MediaTokenError`) when a
        fetch failed in a way that can pass (retry the input later), :class:`InvalidMessageError` for an envelope
        that is not a message."""
        if env.kind is not InputKind.MESSAGE:
            raise InvalidMessageError(f"only a message is prepared for a turn, not a {env.kind}")
        caption = env.text or ""
        if env.media is None:
            return Prepared(message=msgs.user(caption))
        fetcher = self.fetcher_for(env.conversation_id) if self.fetcher_for is not None else self.fetcher
        if not self.reads_images or fetcher is None:
            return self._unseen(env, caption, "model" if not self.reads_images else "no_fetcher")
        if photos is not None and photos.left <= 0:
            return self._not_loaded(env, caption, "turn_budget", f"the turn already holds {photos.held} bytes")
        try:
            picture = fetcher.fetch(env.media.id, max_bytes=photos.left if photos is not None else None)
        except MediaRejectedError as exc:
            return self._not_loaded(env, caption, exc.reason, exc.message)
        except MediaTokenError:
            metrics.MEDIA.labels("retry", "token").inc()
            raise
        except MediaUnavailableError:
            metrics.MEDIA.labels("retry", "unavailable").inc()
            raise
        if photos is not None:
            photos.held += len(picture.data)
        metrics.MEDIA.labels("attached", "").inc()
        ref = MediaRef(id=env.media.id, mime_type=picture.mime_type)
        return Prepared(message=msgs.user(caption, media=ref), attachment=(env.media.id, picture))

    def _not_loaded(self, env: Envelope, caption: str, reason: str, error: str) -> Prepared:
        log.warning("photo not fetched; answering without it", extra={
            "conversation_id": env.conversation_id, "message_id": env.message_id, "reason": reason, "error": error})
        return self._unseen(env, caption, reason)

    def _unseen(self, env: Envelope, caption: str, reason: str) -> Prepared:
        """The caption alone, marked as a photo's; without a caption, the short answer."""
        if caption.strip():
            metrics.MEDIA.labels("caption", reason).inc()
            return Prepared(message=msgs.user(UNSEEN_CAPTION_PREFIX + caption.strip()))
        metrics.MEDIA.labels("notice", reason).inc()
        return Prepared(notice=self.unsupported_reply)
