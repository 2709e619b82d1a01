"""What to do when the model fails: one pure function of the error, the retries counted and the configuration.

Each failure has its own budget and its own reason:

- a rejected API key (401/403) holds the conversation as an outage would, with no end: the players' messages are
  never dead-lettered for an operator's mistake; WhatsApp refusing its token for a photo is held the same way;
- an outage is retried with backoff (the input stays at the head), up to ``max_model_retries``;
- an answer Parley cannot read gets a small budget of its own (``max_bad_response_retries``, counted apart from
  the outage's retries, which would otherwise use it up): a provider that sends garbage rarely mends within the
  minutes an outage may last, and the player's next messages wait;
- a permanent refusal dead-letters the input at once, so the inputs behind it proceed;
- a prompt longer than the model's window is compacted under the lease and the turn run once more; still too
  long after that, the input is dead-lettered.

No I/O here: the caller counts the retry first (:func:`counted_as` says which count) and passes the count in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from worker.errors import (
    AuthenticationError,
    ContextLengthError,
    MediaTokenError,
    ModelError,
    ModelResponseError,
)
from worker.service.config import ServiceConfig

Count = Literal["", "retry", "bad_response"]
"""Which retry count a failure adds one to before the decision (``""``: none)."""

Action = Literal["hold", "retry", "dead", "compact"]


@dataclass(frozen=True)
class Verdict:
    """``hold``: retry later with no end (``reason`` says what is held for: ``auth`` or ``media_token``);
    ``retry``: retry later (``reason``: the budget it counts against); ``dead``: dead-letter the input with the
    reason ``reason``; ``compact``: compact the conversation and run the turn once more."""

    action: Action
    reason: str


def counted_as(exc: ModelError) -> Count:
    """Which retry count ``exc`` adds to: a hold or a retryable failure is not a crash, so the attempt is given
    back and a retry counted instead; a permanent failure counts nothing."""
    if isinstance(exc, (AuthenticationError, MediaTokenError)):
        return "retry"
    if isinstance(exc, ContextLengthError) or not exc.retryable:
        return ""
    return "bad_response" if isinstance(exc, ModelResponseError) else "retry"


def decide(exc: ModelError, retries: int, config: ServiceConfig, *, compacted: bool = False) -> Verdict:
    """What to do about ``exc``; ``retries``: the count :func:`counted_as` named, after adding this failure;
    ``compacted``: the turn already ran again on a compacted state."""
    if isinstance(exc, ContextLengthError):
        return Verdict("dead", "context_length") if compacted else Verdict("compact", "context_length")
    if isinstance(exc, AuthenticationError):
        return Verdict("hold", "auth")
    if isinstance(exc, MediaTokenError):
        return Verdict("hold", "media_token")
    if not exc.retryable:
        return Verdict("dead", "model_rejected")
    if isinstance(exc, ModelResponseError):
        budget, reason = config.drain.max_bad_response_retries, "model_bad_response"
    else:
        budget, reason = config.drain.max_model_retries, "model_unavailable"
    return Verdict("retry" if retries <= budget else "dead", reason)
