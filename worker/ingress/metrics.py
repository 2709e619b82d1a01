"""The ingress's Prometheus metrics, served at ``GET /metrics`` of the webhook process (summed over its uvicorn
workers, see :mod:`worker.ingress.multiproc`)."""

from __future__ import annotations

import time

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from worker.ingress.multiproc import multiprocess_dir

WEBHOOKS = Counter("parley_webhooks_total",
                   "Webhook POSTs, by outcome: ok (200), bad_signature (401: missing or wrong X-Hub-Signature-256), "
                   "too_large (413: over the body limit or the update limit), invalid (400: not JSON or not a "
                   "webhook), mailbox_full (503: a conversation's mailbox refused an input; Meta retries), "
                   "unavailable (503: Redis failed; Meta retries).", ["outcome"])
WEBHOOK_RECORDS = Counter("parley_webhook_records_total",
                          "What the players' messages and the statuses of signed webhooks became, by outcome: accepted "
                          "(a chat turn), event, notice (the short answer to what Parley cannot read), refused (input "
                          "the client refuses, e.g. text over PARLEY_MAX_INPUT_CHARS: answered with "
                          "PARLEY_REFUSED_REPLY), duplicate, mailbox_full, too_old (older than "
                          "PARLEY_WEBHOOK_MAX_AGE_SECONDS: not applied), status, status_too_old, ignored, "
                          "unknown_number (sent to a business number PARLEY_WHATSAPP_NUMBERS_FILE does not list).",
                          ["outcome"])
API_REQUESTS = Counter("parley_api_requests_total",
                       "Requests to the producers' HTTP API (/v1/), by operation (send_message, send_event, reset, "
                       "delete, summary) and HTTP status (202 accepted, 401/403 refused token or scope, 400/422 bad "
                       "input, 413 too large, 429 mailbox full, 503 Redis unavailable, ...).", ["operation", "status"])
API_TOKENS_FILE_LOADS = Counter("parley_api_tokens_file_loads_total",
                                "Reads of PARLEY_API_TOKENS_FILE after it changed, by outcome: loaded (its tokens "
                                "apply from the next request) or refused (not readable or not valid: the last good "
                                "tokens stay, the error is logged).", ["outcome"])
# The newest of every worker's value ("max"): an alert compares the two to see a wrong app secret.
_LAST_VALID = "parley_webhook_last_valid_signature_timestamp_seconds"
_LAST_BAD = "parley_webhook_last_bad_signature_timestamp_seconds"
LAST_VALID_SIGNATURE = Gauge(_LAST_VALID,
                             "Unix time of the last webhook POST whose signature was valid (0: none yet).",
                             multiprocess_mode="max")
LAST_BAD_SIGNATURE = Gauge(_LAST_BAD,
                           "Unix time of the last webhook POST refused for a missing or wrong signature (0: none yet).",
                           multiprocess_mode="max")


def signature_checked(valid: bool) -> None:
    """Count a signature check in the gauges (the POST's outcome is counted apart)."""
    (LAST_VALID_SIGNATURE if valid else LAST_BAD_SIGNATURE).set(time.time())


def exposition() -> bytes:
    """The text exposition of every metric of the process, or of every sibling worker's, summed."""
    path = multiprocess_dir()
    if path is None:
        return generate_latest(REGISTRY)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
    return generate_latest(registry)


def signature_times() -> tuple[float, float]:
    """(last valid, last bad) signature times, the newest over every worker, 0 when none: what ``/healthz`` says."""
    path = multiprocess_dir()
    if path is None:
        return LAST_VALID_SIGNATURE._value.get(), LAST_BAD_SIGNATURE._value.get()
    found = {_LAST_VALID: 0.0, _LAST_BAD: 0.0}
    for metric in MultiProcessCollector(None, path=path).collect():  # type: ignore[no-untyped-call]
        if metric.name in found:
            found[metric.name] = max((s.value for s in metric.samples), default=0.0)
    return found[_LAST_VALID], found[_LAST_BAD]
