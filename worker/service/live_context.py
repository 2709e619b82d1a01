"""The game's live context of a turn: fetched fresh at the start of every model turn, added to that turn's system
prompt, never stored in the state (the system prompt is supplied fresh on every turn and never stored).

A fetch that fails (a timeout, an error, an unusable answer) never fails the turn: the turn goes on with the
conversation's last good context when that is at most ``max_age`` seconds old, else without (:func:`choose`);
counted in ``parley_game_context_total`` by outcome and logged. The last good context is kept in Redis beside the
conversation (:mod:`worker.store.game_context`, expiring after ``max_age``, written only under the drain's lease and
deleted with the conversation), not in the process: the worker that takes a conversation over after a crash has it
too.

The text is the game's own words (from its endpoint or its callable, keyed by the conversation id); nothing a player
sends reaches it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from prometheus_client import Counter

from worker import metrics
from worker.errors import GameContextError, StoreError
from worker.store.interfaces import DrainStore

log = logging.getLogger("parley.service")

Outcome = Literal["ok", "stale_used", "missing"]

_COUNTED: dict[str, Counter] = {o: metrics.GAME_CONTEXT.labels(o) for o in ("ok", "stale_used", "missing")}


class ContextSource(Protocol):
    """Where the context comes from (:mod:`worker.game_context`): the text for the turn of ``input_id`` (None:
    nothing this turn), or :class:`~worker.errors.GameContextError`."""

    timeout: float

    def fetch(self, conversation_id: str, input_id: str) -> str | None: ...


@dataclass(frozen=True)
class Kept:
    """A good context as the store kept it: its text ("" when the game said there was nothing) and when it was
    fetched (unix seconds)."""

    text: str
    at: float


def choose(fetched: str | GameContextError | None, last: Kept | None, now: float,
           max_age: float) -> tuple[str | None, Outcome]:
    """The turn's context and its outcome: the fetched text when the fetch worked; after a failure the last good
    context when it is at most ``max_age`` seconds old (and not from the future: a clock step is no licence to
    keep it for good), else none."""
    if not isinstance(fetched, GameContextError):
        return fetched, "ok"
    if last is not None and max_age > 0 and 0 <= now - last.at <= max_age:
        return last.text or None, "stale_used"
    return None, "missing"


def checked(text: str | None, max_chars: int) -> str | None:
    """``text`` when it may go into a system prompt: at most ``max_chars`` characters and encodable (a lone
    surrogate would make the turn's input invalid, dead-lettering the player's message)."""
    if text is None or not text.strip():
        return None
    if len(text) > max_chars:
        raise GameContextError("oversize", f"the text is {len(text)} characters; the limit is {max_chars}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise GameContextError("bad_system", "the text is not valid Unicode (a lone surrogate)") from exc
    return text


class LiveContext:
    """Fetches a turn's context from ``source`` and falls back as :func:`choose` says. ``clock`` (unix seconds) is
    injected in tests."""

    def __init__(self, source: ContextSource, store: DrainStore, *, max_age: float, max_chars: int,
                 clock: Callable[[], float] = time.time) -> None:
        self.source, self.store = source, store
        self.max_age, self.max_chars, self.clock = max_age, max_chars, clock

    def for_turn(self, cid: str, input_id: str, token: int) -> str | None:
        """The context text for the turn of ``input_id`` (None: the turn goes on without), under the drain's lease
        ``token``."""
        fetched: str | GameContextError | None
        try:
            fetched = checked(self.source.fetch(cid, input_id), self.max_chars)
        except GameContextError as exc:
            fetched = exc
        except Exception as exc:  # a source's bug must not fail the player's turn either
            fetched = GameContextError("error", f"{type(exc).__name__}: {exc}")
        now = self.clock()
        if isinstance(fetched, GameContextError):
            metrics.GAME_CONTEXT_FAILURES.labels(fetched.reason).inc()
            text, outcome = choose(fetched, self._last(cid), now, self.max_age)
            log.warning("live game context unavailable; turn goes on %s",
                        "with the last good one" if outcome == "stale_used" else "without",
                        extra={"conversation_id": cid, "message_id": input_id, "outcome": outcome,
                               "reason": fetched.reason, "error": str(fetched)})
        else:
            text, outcome = fetched, "ok"
            self._keep(cid, token, text or "", now)
        _COUNTED[outcome].inc()
        return text

    def _last(self, cid: str) -> Kept | None:
        if self.max_age <= 0:
            return None
        try:
            kept = self.store.last_context(cid)
        except StoreError:
            return None
        return Kept(*kept) if kept is not None else None

    def _keep(self, cid: str, token: int, text: str, now: float) -> None:
        if self.max_age <= 0:
            return
        try:
            self.store.keep_context(cid, token, text, at=now, ttl_ms=int(self.max_age * 1000))
        except StoreError as exc:  # the turn has its context; only a later failed fetch misses it
            log.warning("could not keep the live game context", extra={"conversation_id": cid, "error": str(exc)})
