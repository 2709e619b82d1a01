"""What the drain does about a model failure, row by row: the pure decision of worker.service.drain.failures.

Each row is a failure, the retries counted so far (this one included) and, for a prompt too long, whether the
turn already ran on a compacted state; the columns are which retry count the failure adds to and the verdict.
The drain tests (test_model_recovery.py, test_service_failures.py, test_whatsapp_token.py) show the same rows
end to end; this table pins the decision itself, with the budgets of the configuration below.
"""

from __future__ import annotations

import pytest

from tests.configs import bare_config
from worker.errors import (
    AuthenticationError,
    CircuitOpenError,
    ContextLengthError,
    MediaTokenError,
    MediaUnavailableError,
    ModelError,
    ModelRequestError,
    ModelResponseError,
    ModelTimeoutError,
    ModelUnavailableError,
    RateLimitedError,
)
from worker.service.drain.failures import Count, Verdict, counted_as, decide

CONFIG = bare_config(max_model_retries=30, max_bad_response_retries=3)

ROWS = [
    # the provider refuses the key: held with no end, however many retries (never the player's fault)
    (AuthenticationError("401", provider="openai", status=401), 1, False, "retry", Verdict("hold", "auth")),
    (AuthenticationError("403", provider="anthropic", status=403), 10_000, False, "retry", Verdict("hold", "auth")),
    # WhatsApp refuses its token for a photo: held the same way
    (MediaTokenError("190", provider="whatsapp-media"), 1, False, "retry", Verdict("hold", "media_token")),
    (MediaTokenError("190", provider="whatsapp-media"), 10_000, False, "retry", Verdict("hold", "media_token")),
    # an outage: retried up to max_model_retries, then dead-lettered
    (ModelUnavailableError("503"), 1, False, "retry", Verdict("retry", "model_unavailable")),
    (ModelTimeoutError("timed out"), 30, False, "retry", Verdict("retry", "model_unavailable")),
    (RateLimitedError("429", retry_after=3.0), 31, False, "retry", Verdict("dead", "model_unavailable")),
    (CircuitOpenError("open"), 31, False, "retry", Verdict("dead", "model_unavailable")),
    (MediaUnavailableError("timed out", provider="whatsapp-media"), 2, False, "retry",
     Verdict("retry", "model_unavailable")),
    # an answer Parley cannot read: its own, smaller budget, counted apart
    (ModelResponseError("no choices"), 1, False, "bad_response", Verdict("retry", "model_bad_response")),
    (ModelResponseError("no choices"), 3, False, "bad_response", Verdict("retry", "model_bad_response")),
    (ModelResponseError("no choices"), 4, False, "bad_response", Verdict("dead", "model_bad_response")),
    # permanent: dead-lettered at once, no retry counted
    (ModelRequestError("400 bad request"), 0, False, "", Verdict("dead", "model_rejected")),
    (ModelError("unknown"), 0, False, "", Verdict("dead", "model_rejected")),
    # a prompt longer than the window: compact and run once more, then dead-letter
    (ContextLengthError("too long"), 0, False, "", Verdict("compact", "context_length")),
    (ContextLengthError("still too long"), 0, True, "", Verdict("dead", "context_length")),
    # a compacted turn that meets another failure: decided as that failure
    (RateLimitedError("429"), 2, True, "retry", Verdict("retry", "model_unavailable")),
    (AuthenticationError("401", status=401), 2, True, "retry", Verdict("hold", "auth")),
]


@pytest.mark.parametrize(("exc", "retries", "compacted", "count", "verdict"), ROWS,
                         ids=[f"{type(r[0]).__name__}-{r[1]}{'-compacted' if r[2] else ''}" for r in ROWS])
def test_the_decision_about_a_model_failure(exc: ModelError, retries: int, compacted: bool, count: Count,
                                            verdict: Verdict) -> None:
    assert counted_as(exc) == count
    assert decide(exc, retries, CONFIG, compacted=compacted) == verdict


@pytest.mark.parametrize(("bad", "limit"), [(False, 30), (True, 3)])
def test_each_budget_ends_exactly_at_its_setting(bad: bool, limit: int) -> None:
    exc = ModelResponseError("garbage") if bad else ModelUnavailableError("down")
    assert decide(exc, limit, CONFIG).action == "retry"
    assert decide(exc, limit + 1, CONFIG).action == "dead"
    zero = bare_config(max_model_retries=0, max_bad_response_retries=0)
    assert decide(exc, 1, zero).action == "dead"  # a budget of 0: the first failure is the last
