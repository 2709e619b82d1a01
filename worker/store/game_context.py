"""The game's last good live context of a conversation: kept beside the state, never in it (the system prompt is
supplied fresh on every turn and never stored), so a turn whose fetch failed can use it while it is young enough
(:mod:`worker.service.live_context`). One key under the conversation's hash tag, expiring after the configured age
and deleted with the conversation."""

from __future__ import annotations

from worker.store.core import StoreCore
from worker.store.redis_errors import store_errors


class GameContextStore(StoreCore):
    """``keep_context`` after a good fetch, ``last_context`` after a failed one."""

    @store_errors
    def keep_context(self, cid: str, token: int, text: str, *, at: float, ttl_ms: int) -> bool:
        """Keep ``text`` as ``cid``'s last good context, fetched at ``at`` (unix seconds), for ``ttl_ms``, while
        ``token`` (the drain's lease) is still the conversation's newest; False, writing nothing, once it is not (a
        worker that lost the conversation, or a conversation deleted meanwhile, is not given a context back)."""
        keys = self.keys(cid)
        return self._scripts.keep_context(fence=keys.fence, context=keys.context, token=token,
                                          entry=f"{at!r}\n{text}".encode(), ttl_ms=max(1, int(ttl_ms)))

    @store_errors
    def last_context(self, cid: str) -> tuple[str, float] | None:
        """``cid``'s last good context and when it was fetched, or None (none kept, expired, or unreadable)."""
        raw = self._client.get(self.keys(cid).context)
        if raw is None:
            return None
        at, sep, text = bytes(raw).decode("utf-8", "replace").partition("\n")
        try:
            return (text, float(at)) if sep else None
        except ValueError:
            return None
