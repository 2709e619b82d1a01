"""The wrappers of the scripts of inputs held until due (:mod:`worker.store.timers`)."""

from __future__ import annotations

from typing import Any, ClassVar

from worker.store import lua
from worker.store.keys import ConversationKeys
from worker.store.script_args import FireArgs, FireKeys
from worker.store.script_group import ScriptGroup
from worker.store.script_replies import FireReply


class TimerScripts(ScriptGroup):
    """Scheduling, cancelling and firing timers, and moving a conversation in the due index."""

    SCRIPTS: ClassVar[dict[str, str]] = {
        "_schedule": lua.SCHEDULE,
        "_cancel_timer": lua.CANCEL_TIMER,
        "_fire_timers": lua.FIRE_TIMERS,
        "_set_if_score": lua.SET_IF_SCORE,
    }
    _schedule: Any
    _cancel_timer: Any
    _fire_timers: Any
    _set_if_score: Any

    def schedule(self, *, keys: ConversationKeys, index: str | None, input_id: str, held: bytes, due_ms: int,
                 max_timers: int) -> tuple[int, int]:
        """(an :class:`~worker.store.codes.AcceptCode` code, the timers held after it). ``index``: the due index when
        it may be touched in the same script (not on a Cluster)."""
        code, held_n = self._replication.call(
            self._client, self._schedule, what="accept",
            keys=[keys.timers, keys.timed, keys.seen, keys.tomb, *([index] if index else [])],
            args=[input_id, held, due_ms, max_timers, keys.cid if index else ""])
        return int(code), int(held_n)

    def cancel_timer(self, *, keys: ConversationKeys, input_id: str) -> bool:
        return int(self._cancel_timer(keys=[keys.timers, keys.timed], args=[input_id])) == 1

    def fire_timers(self, *, keys: ConversationKeys, globals_: tuple[str, str] | None, ttl_keys: list[str],
                    args: FireArgs) -> FireReply:
        """``globals_``: (the pending zset, the due index) when they may be touched in the same script."""
        res = self._replication.call(
            self._client, self._fire_timers, what="accept",
            keys=(*FireKeys(keys.timers, keys.timed, keys.inbox, keys.seen, keys.tomb, keys.inbound, keys.hold),
                  *(globals_ or ()), *ttl_keys),
            args=args)
        flat = [bytes(x) for x in res[5] or ()]
        fired = tuple((flat[i].decode("utf-8", "replace"), int(float(flat[i + 1]))) for i in range(0, len(flat), 2))
        return FireReply(int(res[0]), int(res[1]), int(res[2]), int(res[3]) == 1, int(res[4]), fired,
                         int(res[6]) == 1)

    def set_if_score(self, *, zset: str, member: str, score: float, new_score: int | None) -> bool:
        return int(self._set_if_score(keys=[zset], args=[member, repr(score),
                                                          "" if new_score is None else new_score])) == 1
