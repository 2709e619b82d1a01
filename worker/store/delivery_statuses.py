"""Delivery statuses in Redis: what the webhook ingress records of WhatsApp's status webhooks (sent, delivered,
read, failed) and what the CLI and delivery read back, and the ingress's word that it records them at all (workers
left with ``PARLEY_STATUS_WEBHOOKS=auto`` wait for a status before resending a part a crash left in flight only
where some ingress said so)."""

from __future__ import annotations

import time

from worker.store.answers import MessageStatus, StatusRecorded
from worker.store.core import StoreCore
from worker.store.redis_errors import store_errors

#: How long an ingress's word that it records status webhooks holds, and how often one says it again at most.
STATUS_INGRESS_TTL_MS = 86_400_000
STATUS_INGRESS_REFRESH_S = 60.0


class DeliveryStatusStore(StoreCore):
    """The latest status of each message sent, and the ingress's word."""

    _status_announced: float | None = None  # when this process (an ingress) last said it records statuses

    @store_errors
    def record_status(self, cid: str, provider_id: str, status: str, detail: str = "", *,
                      reply_id: str | None = None, part: int = 0, record: bytes | None = None) -> StatusRecorded:
        """Record a delivery status webhook (sent, delivered, read, failed, ...) of message ``provider_id``.

        The message's status only moves forward, whatever order the webhooks come in (Meta sends ``read`` without
        ``delivered``, and retries old webhooks for a day and a half): sent < delivered < read, failed is final.
        ``reply_id`` and ``part`` name the reply part the message was (the callback data it was sent with): while
        that part is marked in flight the status is kept with it too, so a deliverer that finds it left in flight
        by a crash knows it reached the provider (see :meth:`~worker.store.outbox.OutboxStore.inflight_outcome`).
        The latest statuses of the ``limits.statuses_max`` most recent messages are kept. ``record``: the durable
        record's entry of this status, encoded by the caller, appended only when the status moves forward and the
        record is on."""
        res = self._scripts.record_status(keys=self.keys(cid), provider_id=provider_id, status=status, detail=detail,
                                          max_kept=self.limits.statuses_max, reply_id=reply_id, part=part,
                                          record=self._record_args(cid, record))
        if self._status_announced is not None:  # an ingress that announced itself: statuses keep the word fresh
            self.announce_status_ingress()
        return StatusRecorded(res.moved, res.latest, res.for_part)

    @store_errors
    def statuses(self, cid: str, limit: int = 50) -> list[MessageStatus]:
        """The latest status of each of the ``limit`` messages whose first status came last, oldest first."""
        keys = self.keys(cid)
        ids = [bytes(i) for i in self._client.zrange(keys.statusorder, -limit, -1)] if limit > 0 else []
        if not ids:
            return []
        out = []
        for pid, value in zip(ids, self._client.hmget(keys.statuses, ids), strict=True):
            if value is None:  # trimmed between the two reads
                continue
            status, _, rest = bytes(value).decode("utf-8", "replace").partition("\t")
            at, _, detail = rest.partition("\t")
            out.append(MessageStatus(pid.decode("utf-8", "replace"), status, int(at or 0), detail))
        return out

    @store_errors
    def announce_status_ingress(self) -> None:
        """Say in Redis that a webhook ingress records status webhooks (for a day; once it has, this store says it
        again as it records statuses, at most once a minute)."""
        now = time.monotonic()
        if self._status_announced is None or now - self._status_announced >= STATUS_INGRESS_REFRESH_S:
            self._client.set(self.global_keys.status_ingress, 1, px=STATUS_INGRESS_TTL_MS)
            self._status_announced = now

    @store_errors
    def status_ingress_announced(self) -> bool:
        """Whether an ingress said within the last day that it records status webhooks."""
        return bool(self._client.exists(self.global_keys.status_ingress))
