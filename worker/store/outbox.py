"""The outbox side of the store: what delivery calls. One deliverer per conversation at a time, fenced by the
delivery token; every send is marked in flight before it and sent after it, so a crash in between is seen. Delivery
also reads the clock of WhatsApp's customer-service window here (:meth:`OutboxStore.last_inbound`)."""

from __future__ import annotations

from worker.store.answers import InflightOutcome, OutboxHead
from worker.store.codes import refused
from worker.store.core import StoreCore
from worker.store.entry_codec import claimed_head
from worker.store.redis_errors import store_errors
from worker.store.script_replies import ClaimReply


class OutboxStore(StoreCore):
    """Replies out, part by part, in order."""

    @store_errors
    def last_inbound(self, cid: str) -> float | None:
        """When the player's last message was accepted (seconds since the epoch), or None when none is known (no
        message since this release, or the conversation was deleted or expired idle): the customer-service window
        a send must respect."""
        raw = self._client.get(self.keys(cid).inbound)
        return int(raw) / 1000 if raw is not None else None

    @store_errors
    def last_message(self, cid: str) -> str | None:
        """The WhatsApp id of the player's last message (a wamid), or None when none is known: what an operator's
        reaction reacts to."""
        raw = self._client.get(self.keys(cid).lastmsg)
        return raw.decode() if raw is not None else None

    @store_errors
    def begin_delivery(self, cid: str, lease_ms: int) -> tuple[int | None, OutboxHead | None]:
        """Take the delivery lease and claim the outbox head in one round trip.

        Returns ``(None, None)`` when another worker delivers or nothing waits; else the token and the claimed
        head: its next part is marked in flight, so call the channel next (see :meth:`claim_next`)."""
        res = self._scripts.begin_delivery(keys=self.keys(cid), lease_ms=lease_ms)
        if res.code <= 0:
            return None, None
        return res.code, claimed_head(res)

    @store_errors
    def claim_next(self, cid: str, token: int, lease_ms: int) -> OutboxHead | None:
        """Claim the outbox head (marking its next part in flight), or give the delivery lease up, atomically,
        when the outbox is empty (then returns None)."""
        return self._claim_result(cid, self._scripts.claim_next(keys=self.keys(cid), token=token, lease_ms=lease_ms))

    @store_errors
    def sent_last_claim_next(self, cid: str, token: int, reply_id: str, provider_id: str,
                             lease_ms: int, record: bytes | None = None) -> OutboxHead | None:
        """Record the last part of the head reply as sent, drop the reply from the outbox, and claim the next one
        (or give the lease up when none is left), in one round trip. ``record``: the durable record's entry saying
        the reply was sent, encoded by the caller (appended only while the record is on)."""
        res = self._scripts.sent_last_claim_next(keys=self.keys(cid), token=token, reply_id=reply_id,
                                                 provider_id=provider_id, delivered_max=self.limits.delivered_max,
                                                 lease_ms=lease_ms,
                                                 record=self._record_args(cid, record))
        return self._claim_result(cid, res)

    @staticmethod
    def _claim_result(cid: str, res: ClaimReply) -> OutboxHead | None:
        if res.code < 0:
            raise refused(res.code, cid=cid, lease="delivery lease")
        return claimed_head(res) if res.code == 1 else None

    @store_errors
    def mark_inflight(self, cid: str, token: int, reply_id: str, part: int) -> None:
        code = self._scripts.mark_inflight(keys=self.keys(cid), token=token, reply_id=reply_id, part=part)
        if code < 0:
            raise refused(code, cid=cid, lease="delivery lease")

    @store_errors
    def inflight_outcome(self, cid: str, token: int, reply_id: str, part: int) -> InflightOutcome:
        """What is known of the claimed head's part ``part``, left in flight by a crashed deliverer: the best status
        webhook the ingress recorded for it while it was in flight (proof it reached the provider), and the ms since
        a deliverer first asked (the first call starts that clock).

        Raises :class:`~worker.errors.StaleLeaseError` when the delivery fence moved or the reply left the head."""
        res = self._scripts.inflight_outcome(keys=self.keys(cid), token=token, reply_id=reply_id, part=part)
        if res.code < 0:
            raise refused(res.code, cid=cid, lease=f"delivery of {reply_id}")
        return InflightOutcome(res.status, res.provider_id, res.waited_ms)

    @store_errors
    def clear_inflight(self, cid: str, token: int) -> None:
        self._scripts.clear_inflight(keys=self.keys(cid), token=token)

    @store_errors
    def mark_sent(self, cid: str, token: int, reply_id: str, part: int, provider_id: str,
                  lease_ms: int = 180_000) -> None:
        """Record a sent part that is not the reply's last (and its provider message id); the last one goes
        through :meth:`sent_last_claim_next`, which also takes the reply out of the outbox."""
        code = self._scripts.mark_sent(keys=self.keys(cid), token=token, reply_id=reply_id, part=part,
                                       provider_id=provider_id, lease_ms=lease_ms)
        if code < 0:
            raise refused(code, cid=cid, lease=f"delivery of {reply_id}")

    @store_errors
    def renew_delivery_lease(self, cid: str, token: int, lease_ms: int) -> bool:
        """The heartbeat of a running delivery (a slow send, a throttled channel): as
        :meth:`~worker.store.mailbox.MailboxStore.renew_lease`, for the delivery lease."""
        keys = self.keys(cid)
        return self._scripts.renew_lease(fence=keys.dfence, lease=keys.dlease, token=token, lease_ms=lease_ms)

    @store_errors
    def note_delivery_failure(self, cid: str, token: int, reply_id: str) -> int:
        """Count one failed (retryable) send of the outbox head ``reply_id``; returns the failures counted so far
        for that reply. The count lives with the reply's progress in Redis, so the retry limit holds across task
        restarts, the inline delivery, later turns and the sweeper, and starts again for the next reply.

        Raises :class:`~worker.errors.StaleLeaseError` when the delivery fence moved (or the reply left the head).
        """
        n = self._scripts.note_delivery_failure(keys=self.keys(cid), token=token, reply_id=reply_id)
        if n < 0:
            raise refused(n, cid=cid, lease=f"delivery of {reply_id}")
        return n

    @store_errors
    def dead_letter_reply(self, cid: str, token: int, reply_id: str, dead: bytes, record: bytes | None = None) -> None:
        """Move the outbox head to the dead letters (``dead`` is the dead letter to keep; ``record``: the durable
        record's entry saying the reply failed, encoded by the caller, appended only while the record is on)."""
        self._client.zadd(self.global_keys.dead_index, {cid: self._now_ms()})  # index first, as in commit
        code = self._scripts.dead_reply(keys=self.keys(cid), token=token, reply_id=reply_id, dead_entry=dead,
                                        dead_max=self.limits.dead_max, record=self._record_args(cid, record))
        if code < 0:
            raise refused(code, cid=cid, lease=f"delivery of {reply_id}")

    @store_errors
    def release_delivery(self, cid: str, token: int) -> None:
        """Give the delivery lease up (after an error; the caller re-wakes). A no-op when it is no longer ours."""
        keys = self.keys(cid)
        self._scripts.release(fence=keys.dfence, lease=keys.dlease, token=token)
