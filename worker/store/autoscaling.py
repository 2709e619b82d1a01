"""The backlog an autoscaler scales on: how many conversations wait for a worker, and for how long.

Read from the sweeper's ``pending`` set (conversations that may have work, scored by when work appeared in them)
without scanning Redis: the ``sample`` longest-marked conversations are probed in one pipelined round trip
(inbox length and head input), and the head input's accept time comes from the conversation's ``seen`` set (the
producer's dedupe record, scored in ms). The longest-marked conversations are where the oldest inputs are,
so the age is exact whenever the set is no larger than the sample, and a close lower bound otherwise.
"""

from __future__ import annotations

from worker.errors import InvalidConversationIdError
from worker.store.answers import Backlog
from worker.store.core import StoreCore
from worker.store.entry_codec import split_entry
from worker.store.redis_errors import store_errors


class AutoscalingStore(StoreCore):
    """The autoscaling signals' read side (:meth:`backlog`, part of :class:`~worker.store.interfaces.SweeperStore`)."""

    @store_errors
    def backlog(self, sample: int = 1000) -> Backlog:
        """One scrape's view of the backlog; costs two round trips and at most ``sample`` probes."""
        total = int(self._client.zcard(self.global_keys.pending))
        rows = self._client.zrange(self.global_keys.pending, 0, max(0, sample - 1), withscores=True) if total else []
        pipe = self._client.pipeline(transaction=False)
        probed: list[str] = []
        for member, _ in rows:
            cid = member.decode("utf-8", "replace")
            try:
                keys = self.keys(cid)
            except InvalidConversationIdError:
                continue
            pipe.llen(keys.inbox)
            pipe.lindex(keys.inbox, 0)
            probed.append(cid)
        answers = pipe.execute() if probed else []
        heads: list[tuple[str, str, float]] = []
        for i, cid in enumerate(probed):
            depth, head = answers[2 * i], answers[2 * i + 1]
            if depth and head:
                heads.append((cid, split_entry(head)[0], float(rows[i][1])))
        now = self._now_ms()
        oldest = now
        if heads:
            pipe = self._client.pipeline(transaction=False)
            for cid, input_id, _ in heads:
                pipe.zscore(self.keys(cid).seen, input_id)
            for (_, _, touched), accepted in zip(heads, pipe.execute(), strict=True):
                # An input older than the dedupe window has left ``seen``: its mark is the best bound left.
                oldest = min(oldest, int(accepted if accepted is not None else touched))
        waiting = len(heads) if total <= len(rows) else round(len(heads) * total / max(1, len(rows)))
        return Backlog(waiting, max(0.0, (now - oldest) / 1000) if heads else 0.0, len(rows), total)
