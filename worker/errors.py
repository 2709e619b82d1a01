"""Every exception Parley raises to its callers.

The tree::

    ParleyError
    ├── ConfigurationError
    ├── RetryLater                      (retryable: after ``countdown`` seconds)
    ├── InputError                      (also a ValueError)
    │   ├── InvalidMessageError
    │   │   └── InvalidReplyPartError
    │   ├── InvalidConversationIdError
    │   ├── EnvelopeError
    │   ├── OversizeInputError
    │   │   └── EnvelopeTooLargeError
    │   ├── InvalidTextError
    │   ├── InvalidScheduleError
    │   └── WebhookTooLargeError
    ├── StateError
    │   ├── StateDecodeError
    │   └── ArchiveDecodeError
    ├── CompactionFailed
    ├── ToolError
    ├── GameContextError
    ├── ModelError
    │   ├── ModelUnavailableError       (retryable)
    │   │   ├── ModelTimeoutError
    │   │   ├── RateLimitedError
    │   │   └── CircuitOpenError
    │   ├── ModelRequestError           (permanent)
    │   │   ├── AuthenticationError
    │   │   └── ContextLengthError
    │   └── ModelResponseError
    ├── StoreError
    │   ├── StaleLeaseError
    │   ├── StoreUnavailableError       (retryable)
    │   └── InboxFullError              (also an InputError)
    ├── DeliveryError
    │   ├── DeliveryRetryableError      (retryable)
    │   │   └── SendOutcomeUnknownError
    │   ├── DeliveryPermanentError
    │   │   ├── OutsideWindowError
    │   │   └── OptedOutError
    │   └── WhatsAppTokenError          (retryable: held until the token works)
    ├── MediaError
    │   ├── MediaRejectedError          (permanent)
    │   └── MediaUnavailableError       (retryable; also a ModelUnavailableError)
    │       └── MediaTokenError         (held until the token works)
    ├── RecordError
    │   └── DatabaseUnavailableError    (retryable)
    └── ReplayRefusedError

Every class carries ``retryable``: whether trying the same thing again later can succeed. Tasks use it
to choose between a Celery retry and the dead-letter list.
"""

from __future__ import annotations


class ParleyError(Exception):
    """Raised when anything in Parley fails; the root of the tree."""

    retryable: bool = False


class ConfigurationError(ParleyError):
    """Raised when a setting is missing or inconsistent (e.g. an unknown provider name)."""


class RetryLater(ParleyError):
    """Raised when the service cannot go on now but can later (a model or channel unavailable, a pace to keep, a
    status to wait for): nothing was lost, and the task retries after ``countdown`` seconds. ``reason`` says why,
    for the log."""

    retryable = True

    def __init__(self, reason: str, countdown: float) -> None:
        super().__init__(reason)
        self.reason = reason
        self.countdown = countdown


class InputError(ParleyError, ValueError):
    """Raised when a caller passes input that can never be accepted as it is.

    ``field`` names the argument at fault when the raiser knows it (``text``, ``conversation_id``, ...): the HTTP API
    answers with it."""

    field: str | None = None

    def __init__(self, *args: object, field: str | None = None) -> None:
        super().__init__(*args)
        if field is not None:
            self.field = field


class InvalidMessageError(InputError):
    """Raised when a message a caller adds has an unknown role, empty content or a malformed tool call."""


class InvalidConversationIdError(InputError):
    """Raised when a conversation id is empty, too long or has characters that could escape its Redis keys."""

    field = "conversation_id"


class EnvelopeError(InputError):
    """Raised when a queued envelope is malformed: not msgpack, missing fields, wrong types."""


class OversizeInputError(InputError):
    """Raised when a text, envelope or state is larger than the configured limit."""


class EnvelopeTooLargeError(OversizeInputError):
    """Raised when an input, encoded as its envelope, is larger than an envelope may be (``MAX_ENVELOPE_BYTES``):
    stored, it could never be read back. The HTTP API answers 413."""


class InvalidReplyPartError(InvalidMessageError):
    """Raised when a reply part (an operator's, a game tool's or a reply tool's) is of an unknown type or breaks one
    of WhatsApp's limits (a button title over 20 characters, more than 10 list rows, a latitude out of range...)."""


class InvalidTextError(InputError):
    """Raised when a text or an id holds a character UTF-8 cannot encode (a lone surrogate), so it could never be
    stored or sent."""


class InvalidScheduleError(InputError):
    """Raised when an input's due time (``at``) is not a timezone-aware datetime (or, over HTTP, not an RFC 3339
    timestamp with an offset), or is more than a year ahead."""

    field = "at"


class WebhookTooLargeError(InputError):
    """Raised when a webhook body holds far more than Meta ever batches in one POST (more JSON objects or more
    updates than the ingress's limits), so it is refused before it costs seconds and hundreds of MB."""


class StateError(ParleyError):
    """Raised when a conversation state blob cannot be used."""


class StateDecodeError(StateError):
    """Raised when a state blob is corrupt, of an unknown version, locked to another provider or too large.

    ``reason`` is a short machine-readable word (``corrupt``, ``version``, ``provider``, ``oversize``,
    ``invalid``) for metrics and the quarantine record. The public API never lets this escape: a turn
    continues from a fresh state and reports the reason instead.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class ArchiveDecodeError(StateError):
    """Raised when a conversation archive's bytes are corrupt, truncated or of an unknown version.

    ``reason`` is a short machine-readable word (``corrupt``, ``version``, ``invalid``) like
    :class:`StateDecodeError`'s; the archive is what recall searches, never what a turn needs, so a caller may log
    it and answer without recall."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class CompactionFailed(ParleyError):
    """Raised when a compactor could not do its work (the summariser failed or answered nothing); the state stays
    as it was, and the chain goes on with its next step."""


class ToolError(ParleyError):
    """Raised when a tool is declared wrongly (bad name, duplicate, non-object schema)."""


class GameContextError(ParleyError):
    """Raised when the game's live context for a turn could not be had: the source timed out, failed or answered
    something unusable (``reason`` says which, as the metrics count it). The turn goes on without it."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


class ModelError(ParleyError):
    """Raised when a language-model provider call fails.

    ``provider`` names the provider, ``status`` is the HTTP status when there was one, and ``message`` is
    the provider's own explanation when it gave one.
    """

    def __init__(self, message: str, *, provider: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.provider = provider
        self.status = status


class ModelUnavailableError(ModelError):
    """Raised when a provider is overloaded, failing (5xx) or unreachable; trying later can succeed."""

    retryable = True

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, provider=provider, status=status)
        self.retry_after = retry_after


class ModelTimeoutError(ModelUnavailableError):
    """Raised when a provider did not connect or answer within the configured timeout."""


class RateLimitedError(ModelUnavailableError):
    """Raised when a provider kept answering 429 (or 529/overloaded) after the allowed retries."""


class CircuitOpenError(ModelUnavailableError):
    """Raised when the provider's circuit breaker is open after repeated failures; no call was made."""


class ModelRequestError(ModelError):
    """Raised when a provider rejects the request itself (400, 404); the same request will fail again."""


class AuthenticationError(ModelRequestError):
    """Raised when a provider rejects the API key (401) or refuses it access (403).

    The same call fails again until someone fixes the key, but the players' messages are not at fault: the
    worker holds every conversation, as in an outage, instead of dead-lettering their inputs
    (``parley_provider_auth_failing`` is 1 meanwhile)."""


class ContextLengthError(ModelRequestError):
    """Raised when the prompt is longer than the model's context window (OpenAI ``context_length_exceeded``,
    Anthropic "prompt is too long"). The worker compacts the conversation and retries the turn once."""


class ModelResponseError(ModelError):
    """Raised when a provider answers with a body Parley cannot read: bad JSON, no choices, wrong shape."""

    retryable = True


class StoreError(ParleyError):
    """Raised when the Redis store refuses or fails an operation."""


class StaleLeaseError(StoreError):
    """Raised when a worker tries to commit after its lease on the conversation was taken by another."""


class StoreUnavailableError(StoreError):
    """Raised when Redis cannot be reached or dropped the connection; trying later can succeed."""

    retryable = True


class DeliveryError(ParleyError):
    """Raised when a reply cannot be delivered to its channel.

    ``code`` is the channel's error code (WhatsApp's ``error.code``) when there was one.
    """

    def __init__(self, message: str, *, code: int | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status


class DeliveryRetryableError(DeliveryError):
    """Raised when the channel throttled us (130429, 131056) or failed (5xx, network); retry with backoff."""

    retryable = True

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, code=code, status=status)
        self.retry_after = retry_after


class SendOutcomeUnknownError(DeliveryRetryableError):
    """Raised when a send timed out after the request went out (or was answered 200 without a message id): it may
    have reached WhatsApp. The deliverer treats the part as one a crash left in flight (status webhooks decide when
    they are on; otherwise the resend is counted in ``parley_duplicate_send_window_total``)."""


class DeliveryPermanentError(DeliveryError):
    """Raised when the channel refused the message for good (131047 outside the 24-hour window, bad recipient,
    expired token); the reply is dead-lettered with the reason."""


class OutsideWindowError(DeliveryPermanentError):
    """Raised when a WhatsApp reply falls outside the 24-hour customer-service window (the player's last message is
    older, or the API answered 131047) and no template is configured to send instead; the reply is dead-lettered
    with the reason ``outside_window``. ``code`` is 131047 when the API said so, None when no call was made."""


class OptedOutError(DeliveryPermanentError):
    """Raised when a reply outside the customer-service window would go as a template to a player who opted out
    (an opt-out phrase, or Meta's marketing opt-out): nothing is sent, the reply is dead-lettered with the reason
    ``opted_out``."""


class WhatsAppTokenError(DeliveryError):
    """Raised when WhatsApp rejects the access token (error code 190, or a 401 without a code). No reply is at
    fault: deliveries are held (never dead-lettered) and retried with backoff until the token works again;
    ``parley_whatsapp_token_rejected`` is 1 meanwhile. ``refusals`` is how many refusals in a row this process saw."""

    retryable = True

    def __init__(self, message: str, *, code: int | None = None, status: int | None = None,
                 refusals: int = 1) -> None:
        super().__init__(message, code=code, status=status)
        self.refusals = refusals


class InboxFullError(StoreError, InputError):
    """Raised when a conversation's mailbox already holds the configured maximum of waiting inputs."""


class MediaError(ParleyError):
    """Raised when a photo a player sent cannot be fetched from the channel (the WhatsApp Cloud API)."""


class MediaRejectedError(MediaError):
    """Raised when a photo can never be fetched as it is: larger than ``PARLEY_MEDIA_MAX_BYTES`` (as declared or as
    served), not an image, or refused by the API (a 4xx such as an expired or unknown media id, a revoked token).

    ``reason`` is a short word for metrics and logs: ``too_large``, ``not_image``, ``refused``, ``bad_answer``,
    ``bad_id``. The turn goes on without the picture (its caption, or the configured short answer)."""

    def __init__(self, message: str, *, reason: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.status = status


class MediaUnavailableError(MediaError, ModelUnavailableError):
    """Raised when fetching a photo failed in a way that can pass: a timeout, a refused connection, a 5xx, or
    throttling (429, or a throttling error code).

    It is also a :class:`ModelUnavailableError` on purpose: the drain already retries those with backoff (the
    input stays at the head of the mailbox, the retry is counted against ``PARLEY_MAX_MODEL_RETRIES``, then
    dead-lettered), which is what a media outage needs too. ``provider`` is ``"whatsapp-media"``."""

    retryable = True


class MediaTokenError(MediaUnavailableError):
    """Raised when the media endpoints reject the access token (error code 190, or a 401 without a code). The
    photo is not at fault: the drain holds the input (no retry budget, no dead letter) until the token works."""


class RecordError(ParleyError):
    """Raised when a durable-record entry does not decode, or the record's database refuses what it is given
    (a schema newer than this Parley, a query on a database whose schema was never created)."""


class DatabaseUnavailableError(RecordError):
    """Raised when the record's database (``PARLEY_DATABASE_URL``) cannot be reached or drops the connection; the
    exporter leaves the stream as it was and tries again."""

    retryable = True


class ReplayRefusedError(ParleyError):
    """Raised when a dead letter cannot be replayed: it is gone (trimmed, replayed already), or its conversation was
    deleted after it was written (the conversation's tombstone says so: a deleted player's words never come back)."""
