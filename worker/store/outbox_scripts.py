"""The wrappers of the scripts delivery runs: the claims of the outbox head, the marks around a send, and the pace."""

from __future__ import annotations

from typing import Any, ClassVar

from worker.store import lua
from worker.store.keys import ConversationKeys, PaceKeys
from worker.store.script_args import DeadReplyArgs, DeadReplyKeys, PaceArgs, RecordArgs, SentLastArgs, SentLastKeys
from worker.store.script_group import ScriptGroup
from worker.store.script_replies import ClaimReply, InflightReply, PaceReply, text_or_none


class OutboxScripts(ScriptGroup):
    """Delivering replies: the delivery lease's claims, the in-flight and sent marks, a dead reply, and the shared pace."""

    SCRIPTS: ClassVar[dict[str, str]] = {
        "_begin_delivery": lua.BEGIN_DELIVERY,
        "_claim_next": lua.CLAIM_NEXT,
        "_sent_last": lua.SENT_LAST_CLAIM_NEXT,
        "_mark_inflight": lua.MARK_INFLIGHT,
        "_clear_inflight": lua.CLEAR_INFLIGHT,
        "_mark_sent": lua.MARK_SENT,
        "_dead_reply": lua.DEAD_REPLY,
        "_inflight_outcome": lua.INFLIGHT_OUTCOME,
        "_failure": lua.NOTE_DELIVERY_FAILURE,
        "_pace": lua.PACE,
    }
    _begin_delivery: Any
    _claim_next: Any
    _sent_last: Any
    _mark_inflight: Any
    _clear_inflight: Any
    _mark_sent: Any
    _dead_reply: Any
    _inflight_outcome: Any
    _failure: Any
    _pace: Any

    # The claims and the marks around a send wait for the replicas like the accept and the commit: a claim lost in a
    # failover would let the next deliverer send the part again without knowing it was in flight (a resend nobody
    # counts), and a lost sent mark would resend a part the player has.

    def begin_delivery(self, *, keys: ConversationKeys, lease_ms: int) -> ClaimReply:
        return ClaimReply.parse(self._replication.call(
            self._client, self._begin_delivery, keys=[keys.dlease, keys.dfence, keys.outbox, keys.sent, keys.inbound],
            args=[lease_ms], what="claim"))

    def claim_next(self, *, keys: ConversationKeys, token: int, lease_ms: int) -> ClaimReply:
        return ClaimReply.parse(self._replication.call(
            self._client, self._claim_next, keys=[keys.dfence, keys.outbox, keys.sent, keys.dlease, keys.inbound],
            args=[token, lease_ms], what="claim"))

    def sent_last_claim_next(self, *, keys: ConversationKeys, token: int, reply_id: str, provider_id: str,
                             delivered_max: int, lease_ms: int, record: RecordArgs) -> ClaimReply:
        return ClaimReply.parse(self._replication.call(
            self._client, self._sent_last, what="sent",
            keys=SentLastKeys(keys.dfence, keys.outbox, keys.sent, keys.delivered, keys.dlease, record.stream,
                              record.dropped,
                              keys.inbound),
            args=SentLastArgs(token, reply_id, provider_id, delivered_max, lease_ms, record.entry, record.max)))

    def mark_inflight(self, *, keys: ConversationKeys, token: int, reply_id: str, part: int) -> int:
        return int(self._replication.call(self._client, self._mark_inflight, keys=[keys.dfence, keys.sent],
                                          args=[token, reply_id, part], what="claim"))

    def clear_inflight(self, *, keys: ConversationKeys, token: int) -> int:
        return int(self._clear_inflight(keys=[keys.dfence, keys.sent], args=[token]))

    def mark_sent(self, *, keys: ConversationKeys, token: int, reply_id: str, part: int, provider_id: str,
                  lease_ms: int) -> int:
        return int(self._replication.call(self._client, self._mark_sent,
                                          keys=[keys.dfence, keys.outbox, keys.sent, keys.dlease],
                                          args=[token, reply_id, part, provider_id, lease_ms], what="sent"))

    def dead_reply(self, *, keys: ConversationKeys, token: int, reply_id: str, dead_entry: bytes, dead_max: int,
                   record: RecordArgs) -> int:
        return int(self._dead_reply(
            keys=DeadReplyKeys(keys.dfence, keys.outbox, keys.sent, keys.dead, record.stream, record.dropped),
            args=DeadReplyArgs(token, reply_id, dead_entry, dead_max, record.entry, record.max)))

    def inflight_outcome(self, *, keys: ConversationKeys, token: int, reply_id: str, part: int) -> InflightReply:
        code, status, provider_id, waited = self._inflight_outcome(keys=[keys.dfence, keys.outbox, keys.sent],
                                                                   args=[token, reply_id, part])
        return InflightReply(int(code), text_or_none(status), text_or_none(provider_id), int(waited or 0))

    def note_delivery_failure(self, *, keys: ConversationKeys, token: int, reply_id: str) -> int:
        """The failures counted for ``reply_id``, or -1 (fence moved) / -3 (no longer the head)."""
        return int(self._failure(keys=[keys.dfence, keys.outbox, keys.sent], args=[token, reply_id]))

    def pace(self, *, keys: PaceKeys, recipient: str, rate_interval_us: int, rate_tolerance_us: int,
             recipient_interval_us: int, recipient_tolerance_us: int, max_wait_us: int) -> PaceReply:
        """An interval of 0 turns its limit off."""
        res = self._pace(keys=[keys.rate, keys.recipient(recipient)],
                         args=PaceArgs(rate_interval_us, rate_tolerance_us, recipient_interval_us,
                                       recipient_tolerance_us, max_wait_us))
        return PaceReply(int(res[0]) == 1, int(res[1]), int(res[2]))

    def take_slot(self, *, bucket: str, interval_us: int, tolerance_us: int) -> PaceReply:
        """One bucket of PACE alone (the recipient's limit off, no wait): a slot taken now, or the wait for one."""
        res = self._pace(keys=[bucket, bucket], args=PaceArgs(interval_us, tolerance_us, 0, 0, 0))
        return PaceReply(int(res[0]) == 1, int(res[1]), int(res[2]))
