"""What the drainer and the deliverer share: the knobs, the wake-up protocol, the metrics
observer of model round trips."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client import Histogram

from worker import metrics
from worker.conversation.chat import RoundTrip
from worker.service.burst import BurstPolicy


class Wake(Protocol):
    """How the service asks for follow-up work: ``wake("drain" | "deliver" | "compact", conversation_id)``,
    optionally after ``countdown`` seconds."""

    def __call__(self, kind: str, cid: str, *, countdown: float = 0.0) -> None: ...


@dataclass(frozen=True)
class ServiceConfig:
    """The knobs of the service (built from :class:`worker.settings.Settings`).

    ``lease_ms`` is how long a conversation (or its delivery) stays owned by a worker that stopped renewing it:
    a running turn renews it every ``lease_ms / 3`` (see :mod:`worker.service.heartbeat`), so it can be short
    and a dead worker's conversations are taken over soon. ``max_hold_ms`` bounds the time between two commits
    that the heartbeat covers: a turn stuck past it loses the conversation, and the fence refuses its commit.
    """

    system_prompt: str | None = None
    lease_ms: int = 10_000
    max_hold_ms: int = 600_000
    max_attempts: int = 5
    max_model_retries: int = 30
    max_bad_response_retries: int = 3
    max_retry_delay: float = 60.0
    delivery_max_attempts: int = 8
    delivery_part_interval: float = 0.0
    # An ingress records status webhooks (see worker.service.inflight); None: when one says so in Redis.
    status_webhooks: bool | None = False
    resend_grace_ms: int = 10_000
    compaction_flag_ms: int = 300_000
    deliver_inline: bool = True
    trace_reply_chars: int = 4000
    burst: BurstPolicy = field(default_factory=BurstPolicy)
    drain_max_turns: int = 0  # inputs a drain applies before it hands the conversation back; 0 = no bound
    drain_max_seconds: float = 0.0  # the same bound in seconds (checked after each commit); 0 = no bound
    dead_letter_reply: str = ""  # the apology a player gets for a dead-lettered message; empty = none
    record: bool = False  # build durable-record entries (a database is configured)
    model_name: str | None = None  # the configured model, for the record when a provider names none
    daily_token_budget: int = 0  # tokens a conversation may use per UTC day; 0 = no budget
    token_budget_reply: str = ""  # what a player over the budget gets instead of the model's answer


# Bound once: looking a labelled child up costs more than the increment (several per model round trip).
_TOKENS_IN, _TOKENS_OUT, _TOKENS_CACHED, _TOKENS_WRITE = (metrics.TOKENS.labels(k)
                                                          for k in ("in", "out", "cached", "cache_write"))


# By purpose (a handful: the chat's calls, the summariser's), bound on first use for the same reason.
_LLM_SECONDS: dict[str, Histogram] = {}


def observe_round_trip(rt: RoundTrip) -> None:
    """Record one model round trip in the metrics (the chat's observer). A call that came back means the
    provider accepts the key again, so the auth alarm is cleared."""
    seconds = _LLM_SECONDS.get(rt.purpose)
    if seconds is None:  # two threads may both bind it: labels() hands both the same child
        seconds = _LLM_SECONDS[rt.purpose] = metrics.LLM_SECONDS.labels(rt.purpose)
    seconds.observe(rt.seconds)
    metrics.PROVIDER_AUTH_FAILING.set(0)
    if rt.usage is not None:
        _TOKENS_IN.inc(rt.usage.prompt_tokens)
        _TOKENS_OUT.inc(rt.usage.completion_tokens)
        if rt.usage.cached_tokens:  # adding 0 changes nothing; most round trips have neither
            _TOKENS_CACHED.inc(rt.usage.cached_tokens)
        if rt.usage.cache_creation_tokens:
            _TOKENS_WRITE.inc(rt.usage.cache_creation_tokens)


def count_pinned_dropped(n: int) -> None:
    """Count pinned items a committed state lost to the pinned cap (``Chat.max_pinned``) or the size bound:
    docs/configuration.md (memory policy) promises pinned events survive compaction, so each time they do not must be visible."""
    if n:
        metrics.PINNED_DROPPED.inc(n)
