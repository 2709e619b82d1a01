"""What the drainer and the deliverer share: the knobs, the wake-up protocol, the metrics
observer of model round trips."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client import Histogram

from worker import metrics
from worker.conversation.chat import RoundTrip
from worker.service.live_context import ContextSource
from worker.service.number_turns import NumberTurns
from worker.settings import Broker, Budget, Burst, Delivery, Drain, GameContext, OptOut


class Wake(Protocol):
    """How the service asks for follow-up work: ``wake("drain" | "deliver" | "compact", conversation_id)``,
    optionally after ``countdown`` seconds."""

    def __call__(self, kind: str, cid: str, *, countdown: float = 0.0) -> None: ...


@dataclass(frozen=True)
class ServiceConfig:
    """The knobs of the service: the settings' groups it reads, as :mod:`worker.settings` declares them (the
    runtime passes the process's own; a default is the group's documented default).

    ``drain.lease_ms`` is how long a conversation (or its delivery) stays owned by a worker that stopped renewing
    it: a running turn renews it every ``lease_ms / 3`` (see :mod:`worker.service.heartbeat`), so it can be short
    and a dead worker's conversations are taken over soon. ``max_hold_ms`` bounds the time between two commits
    that the heartbeat covers (a task's hard time limit): a turn stuck past it loses the conversation, and the fence
    refuses its commit. The service reads each knob from its group (``config.drain.max_attempts``,
    ``config.delivery.deliver_inline``...), the unit it wants being the group's own property.
    """

    drain: Drain = field(default_factory=Drain)
    delivery: Delivery = field(default_factory=Delivery)
    burst: Burst = field(default_factory=Burst)
    budget: Budget = field(default_factory=Budget)
    system_prompt: str | None = None  # the settings' (Llm.system_prompt); a turn may carry its own
    model_name: str | None = None  # the configured model (Llm.model), for the record when a provider names none
    record: bool = False  # build durable-record entries (Record.enabled: a database is configured)
    archive_on: bool = True  # commits write what leaves the history to the conversation's archive (PARLEY_RECALL)
    archive_max_bytes: int = 0  # PARLEY_RECALL_MAX_BYTES: one batch is cut to it (the store drops older ones)
    max_hold_ms: int = Broker().task_time_limit_ms
    compaction_flag_ms: int = 300_000
    trace_reply_chars: int = 4000
    game_context: GameContext = field(default_factory=GameContext)
    context_source: ContextSource | None = None  # the game's live context (worker.game_context), when configured
    numbers: NumberTurns | None = None
    opt_out: OptOut = field(default_factory=OptOut)  # the player's opt-out phrases and confirmations  # several WhatsApp numbers: each one's system prompt and tools for its turns


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
