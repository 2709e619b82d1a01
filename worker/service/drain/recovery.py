"""What the drainer does about the model failures that are neither an outage nor the player's fault.

- A rejected API key (401/403) holds every conversation as an outage would, with no end and no dead letter: the
  players' messages wait until someone fixes the key; :class:`AuthAlarm` says so once a minute, not once per turn.
- A prompt longer than the model's context window gets the conversation compacted under the lease and the turn
  retried once (:func:`compact_for_context`; :mod:`worker.service.drain.decide` drives it).
- Every retry later holds the conversation for a backoff (:func:`retry_later`).

What to do about each failure is decided in :mod:`worker.service.drain.failures`.

Also :func:`usage_trace`, the usage part of a turn's trace entry (cached prompt tokens included).
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import NoReturn

from worker.conversation.chat import Chat, State
from worker.conversation.compaction import TokenBudget
from worker.conversation.messages import Message
from worker.conversation.model import Usage
from worker.durable_record.entries import TurnUsage
from worker.errors import AuthenticationError, RetryLater
from worker.service.config import ServiceConfig
from worker.store.interfaces import DrainStore

log = logging.getLogger("parley.service")


class AuthAlarm:
    """Says that the provider refuses the API key once per ``every`` seconds per process, however many turns
    hit it: with every conversation held, a line per turn would bury the one that matters."""

    def __init__(self, every: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self.clock = clock
        self.last: float | None = None
        self.suppressed = 0
        self._lock = threading.Lock()

    def report(self, exc: AuthenticationError) -> bool:
        """Log ``exc`` unless it was logged less than ``every`` seconds ago; returns whether it logged."""
        with self._lock:
            now = self.clock()
            if self.last is not None and now - self.last < self.every:
                self.suppressed += 1
                return False
            self.last, suppressed, self.suppressed = now, self.suppressed, 0
        log.error("the model provider rejects the API key (%s %s): every conversation is held, nothing is "
                  "dead-lettered, until the key is fixed (OPENAI_API_KEY / ANTHROPIC_API_KEY); "
                  "%d more refusals since the last report", exc.provider, exc.status, suppressed,
                  extra={"provider": exc.provider, "status": exc.status, "error": exc.message})
        return True


AUTH_ALARM = AuthAlarm()
"""The process's alarm (one log line a minute, whichever conversation hit the refusal)."""


def retry_later(store: DrainStore, config: ServiceConfig, cid: str, retries: int, reason: str,
                retry_after: float | None = None) -> NoReturn:
    """Hold the conversation and raise :class:`RetryLater` after an exponential backoff with jitter (up to
    ``max_retry_delay``), or the provider's ``Retry-After`` when that is longer."""
    backoff = min(config.drain.max_retry_delay, 2.0 ** min(retries, 10))
    countdown = max(retry_after or 0.0, backoff * (0.5 + random.random() / 2))
    # Expire a little before the scheduled retry fires, so the retry is never turned away.
    store.hold(cid, int(countdown * 1000) - 250)
    raise RetryLater(reason, countdown)


@dataclasses.dataclass(frozen=True)
class ContextCompaction:
    """A state compacted under the lease for a context-length retry, with what its model calls spent (a
    summariser's tokens, each try's usage and model)."""

    state: bytes
    spent: tuple[tuple[Usage | None, str | None], ...] = ()
    departed: tuple[Message, ...] = ()  # what the compaction took out: the retried turn's commit archives it

    def add_to(self, usage: TurnUsage) -> None:
        """Count what the compaction spent in ``usage`` (the retried turn's: its commit adds them to the day's
        budget and its record entry to the usage ``parley usage`` reports)."""
        for tokens, model in self.spent:
            usage.add(tokens, model)


def compact_for_context(chat: Chat, state: State) -> ContextCompaction | None:
    """The state compacted for a retry after a context-length error, or ``None`` when nothing could be dropped.

    First the configured chain (only its due steps, as the follow-up task would); when none of its triggers
    fired, its budget is above what this model takes (a wrong ``PARLEY_CONTEXT_WINDOW``, or a prompt the
    counts underestimate), so the oldest exchanges are dropped down to half the prompt. What the first try's
    model calls spent counts even when the second one compacts: it was paid for all the same."""
    if not state:
        return None
    report = chat.compact_with_report(state)
    if report.changed:
        return ContextCompaction(report.state, ((report.usage, report.model),), report.departed)
    half = max(1, report.tokens_before // 2)
    forced = dataclasses.replace(chat, compactor=TokenBudget(half, half)).compact_with_report(state)
    if not forced.changed:
        return None
    return ContextCompaction(forced.state, ((report.usage, report.model), (forced.usage, forced.model)),
                             forced.departed)


def usage_trace(usage: Usage | None) -> dict[str, int | None]:
    """The usage fields of a turn's trace entry (the last round trip's, as the provider reported it): prompt
    tokens, of which read from the provider's cache and written to it, and the answer's tokens."""
    if usage is None:
        return {"prompt_tokens": None}
    out: dict[str, int | None] = {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}
    if usage.cached_tokens or usage.cache_creation_tokens:  # a provider without a prompt cache: left out
        out |= {"cached_tokens": usage.cached_tokens, "cache_write_tokens": usage.cache_creation_tokens}
    return out
