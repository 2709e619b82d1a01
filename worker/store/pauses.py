"""Pauses: a person has taken a conversation over (``parley pause``, ``ConversationClient.pause``).

The pause is a flag the drain reads at each turn point, not an input in the mailbox: it takes effect at once, even
with inputs queued ahead of it (a person taking over does not wait for the bot to answer the backlog). The flag is
the conversation's ``paused`` key (the ms the pause ends, ``0`` for none), set with a TTL for a timed pause, so a
timed pause ends by itself with no worker or timer involved. Beside it, the global ``paused`` zset (scored by the
same end, ``+inf`` for none) lets every process compute the ``parley_paused_conversations`` gauge from Redis.

On one Redis server the two are written in one transaction (MULTI/EXEC), so the count never disagrees with the
pauses, even while a pause and a resume race. On a Cluster they live in different slots and are written by separate
commands: the conversation's key first, so the drain never misses a pause; the index second, so a crash can leave the
gauge counting a half-ended pause until its end (or the next resume or delete) clears it, and a pause and a resume
that race can leave it one off until that conversation's next pause or resume (docs/known-limits.md).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from worker.store.answers import Pause
from worker.store.core import StoreCore
from worker.store.redis_errors import store_errors


class PauseStore(StoreCore):
    """Pause, resume, read a pause, and count the paused conversations."""

    @store_errors
    def pause(self, cid: str, seconds: float | None = None) -> Pause:
        """Pause ``cid`` until :meth:`resume`, or for ``seconds`` (then it ends by itself); a second pause
        replaces the first. Returns the pause now in force."""
        key = self.keys(cid).paused
        if seconds is None:
            # With the idle TTL on, an untimed pause expires like the rest of an idle conversation (each input
            # refreshes it): a player who never writes again must not find their next conversation, months later,
            # held for an operator nobody assigned (nor a pause of a conversation that never started count for good).
            self._both(lambda c: c.set(key, b"0", px=self.limits.idle_ttl_ms or None),
                       lambda c: c.zadd(self.global_keys.paused, {cid: math.inf}))
            return Pause(None)
        ms = max(1, int(seconds * 1000))
        until_ms = self._now_ms() + ms
        self._both(lambda c: c.set(key, str(until_ms).encode(), px=ms),
                   lambda c: c.zadd(self.global_keys.paused, {cid: until_ms}))
        return Pause(until_ms / 1000)

    @store_errors
    def resume(self, cid: str) -> bool:
        """End ``cid``'s pause; True when it was paused."""
        raw = self._both(lambda c: c.getdel(self.keys(cid).paused), lambda c: c.zrem(self.global_keys.paused, cid))
        # The idle TTL may have kept a timed pause's key past its end (it refreshes the key): that one had ended.
        return Pause.stored(raw, self._now_ms()) is not None

    def _both(self, first: Callable[[Any], Any], then: Callable[[Any], Any]) -> Any:
        """``first`` then ``then`` (each given a client), as one transaction where the server allows it (not a
        Cluster: the conversation's key and the index are in different slots); what ``first`` answered."""
        if self._cluster:
            done = first(self._client)
            then(self._client)
            return done
        pipe = self._client.pipeline(transaction=True)
        first(pipe)
        then(pipe)
        return pipe.execute()[0]

    @store_errors
    def paused(self, cid: str) -> Pause | None:
        """``cid``'s pause in force, or None (one GET: what the drain reads at each turn point)."""
        return Pause.stored(self._client.get(self.keys(cid).paused), self._now_ms())

    @store_errors
    def paused_count(self) -> int:
        """How many conversations are paused now, fleet-wide (timed pauses that ended are dropped from the index
        first)."""
        key = self.global_keys.paused
        self._client.zremrangebyscore(key, "-inf", time.time() * 1000)
        self._drop_expired_untimed(key)
        return int(self._client.zcard(key))

    def _drop_expired_untimed(self, index: str) -> None:
        """Drop from the index the untimed pauses whose conversation's key has gone (the idle TTL expired the
        conversation): their score, ``+inf``, would count them for ever. Paused conversations are few (people
        take them over one at a time), so one EXISTS each is cheap."""
        untimed = [m.decode() for m in self._client.zrangebyscore(index, "+inf", "+inf")]
        if not untimed:
            return
        pipe = self._client.pipeline(transaction=False)
        for cid in untimed:
            pipe.exists(self.keys(cid).paused)
        gone = [cid for cid, there in zip(untimed, pipe.execute(), strict=True) if not there]
        if gone:
            self._client.zrem(index, *gone)
