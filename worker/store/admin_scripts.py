"""The wrappers of the scripts the ingress's status webhooks, the sweeper and the CLI run."""

from __future__ import annotations

from typing import Any, ClassVar

from worker.store import lua
from worker.store.keys import ConversationKeys
from worker.store.script_args import DeleteArgs, RecordArgs, RecordStatusArgs, RecordStatusKeys
from worker.store.script_group import ScriptGroup
from worker.store.script_replies import StatusReply, text_or_none


class AdminScripts(ScriptGroup):
    """Recording a status, replaying a dead letter, dropping a member still at its score, deleting a conversation."""

    SCRIPTS: ClassVar[dict[str, str]] = {
        "_record_status": lua.RECORD_STATUS,
        "_replay": lua.REPLAY,
        "_zrem_if": lua.ZREM_IF_SCORE,
        "_delete": lua.DELETE_KEEPING_TOMBSTONE,
    }
    _record_status: Any
    _replay: Any
    _zrem_if: Any
    _delete: Any

    def record_status(self, *, keys: ConversationKeys, provider_id: str, status: str, detail: str, max_kept: int,
                      reply_id: str | None, part: int, record: RecordArgs) -> StatusReply:
        """``reply_id`` and ``part``: the reply part the status names (from the callback data), if any."""
        moved, latest, for_part = self._record_status(
            keys=RecordStatusKeys(keys.statuses, keys.statusorder, keys.sent, record.stream, record.dropped),
            args=RecordStatusArgs(provider_id, status, detail, max_kept, reply_id or "", part, record.entry,
                                  record.max))
        return StatusReply(int(moved) == 1, text_or_none(latest) or "", int(for_part) == 1)

    def replay(self, *, dead: str, target: str, index: int, expected: bytes, entry: bytes) -> bool:
        return int(self._replay(keys=[dead, target], args=[index, expected, entry])) == 1

    def zrem_if_score(self, *, zset: str, member: bytes, score: float) -> bool:
        return int(self._zrem_if(keys=[zset], args=[member, repr(score)])) == 1

    def delete(self, *, keys: ConversationKeys, now_ms: int, tomb_ms: int, tomb_max: int,
               record: RecordArgs) -> tuple[int, bytes | None]:
        """Delete every key of the conversation but its tombstone; returns the ids the tombstone holds and the
        delete record's stream id (``None`` when the record is off)."""
        script_keys = [keys.tomb, record.stream, record.dropped, keys.seen,
                       *(key for key in keys.all() if key != keys.seen)]
        held, recorded = self._delete(keys=script_keys,
                                      args=DeleteArgs(now_ms, tomb_ms, tomb_max, f"d:{keys.cid}:{now_ms}",
                                                      record.entry, record.max))
        return int(held), bytes(recorded) if recorded else None
