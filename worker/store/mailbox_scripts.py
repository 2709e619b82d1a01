"""The wrappers of the scripts the mailbox and the drain run: accept, begin, commit, the lease and the journal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from worker.store import lua
from worker.store.keys import ConversationKeys
from worker.store.script_args import (
    NO_ARCHIVE,
    AcceptArgs,
    ArchiveWrite,
    BeginKeys,
    CommitArgs,
    CommitKeys,
    RecordArgs,
)
from worker.store.script_group import ScriptGroup
from worker.store.script_replies import (
    AcceptReply,
    BeginReply,
    ClaimReply,
    CommitReply,
    RecordReply,
    VersionReply,
    blob_bytes,
    opt_bytes,
    text_or_none,
)


class MailboxScripts(ScriptGroup):
    """Accepting inputs and draining them: the drain lease (and the delivery lease's release and renewal, the same scripts), the commit, the turn journal."""

    SCRIPTS: ClassVar[dict[str, str]] = {
        "_accept": lua.ACCEPT,
        "_begin": lua.BEGIN,
        "_commit": lua.COMMIT,
        "_release": lua.RELEASE,
        "_renew": lua.RENEW_LEASE,
        "_retry": lua.NOTE_RETRY,
        "_quarantine": lua.QUARANTINE,
        "_record_step": lua.RECORD_STEP,
        "_defer": lua.DEFER,
        "_keep_context": lua.KEEP_CONTEXT,
        "_read_state": lua.READ_STATE,
    }
    _accept: Any
    _begin: Any
    _commit: Any
    _release: Any
    _renew: Any
    _retry: Any
    _quarantine: Any
    _record_step: Any
    _defer: Any
    _keep_context: Any
    _read_state: Any

    def accept_in(self, *, pipe: Any, keys: list[str], args: AcceptArgs) -> None:
        """Queue ACCEPT (:func:`accept_call`'s KEYS and ARGV) on a pipeline; run it with
        :meth:`Replication.execute`."""
        self._accept(keys=keys, args=args, client=pipe)

    def accept(self, *, keys: list[str], args: AcceptArgs) -> AcceptReply:
        """ACCEPT with :func:`accept_call`'s KEYS and ARGV."""
        return AcceptReply.parse(self._replication.call(self._client, self._accept, keys=keys, args=args,
                                                        what="accept"))

    def begin(self, *, keys: ConversationKeys, lease_ms: int, peek: int = 0, held_tag: str = "") -> BeginReply:
        """``held_tag``: the tag of the state the caller holds decoded ('' none); that blob is not sent again."""
        res = self._begin(keys=BeginKeys(keys.hold, keys.inbox, keys.lease, keys.fence, keys.state, keys.attempts,
                                         keys.journal, keys.blob, keys.paused, keys.opt_out),
                          args=[lease_ms, peek, held_tag])
        return BeginReply(int(res[0]), opt_bytes(res[1]), blob_bytes(res[2]), int(res[3] or 0), int(res[4] or 0),
                          [bytes(e) for e in res[5] or ()], text_or_none(res[6]) or "", int(res[7] or 0) == 1,
                          opt_bytes(res[8]), int(res[9] or 0) == 1)

    def commit(self, *, keys: ConversationKeys, token: int, expected_version: int, input_id: str,
               mode: str, blob: bytes, reply_entry: bytes, trace_entry: bytes, dead_entry: bytes, lease_ms: int,
               trace_max: int, dead_max: int, ttl_ms: int, claim_ms: int, record: RecordArgs, peek: int = 0,
               burst_ids: Sequence[str] = (), usage_day: str = "", tokens: int = 0,
               append_at: int = 0, cut_at: int = 0, archive: ArchiveWrite = NO_ARCHIVE,
               archive_max_bytes: int = 0) -> CommitReply:
        """``burst_ids``: the ids of the inputs after the head that the same turn applied (a burst), in mailbox
        order; ``append_at``: with mode ``append``, the length of the stored blob ``blob`` is appended to;
        ``cut_at`` (0: ``append_at``): where ``blob`` goes instead, the stored bytes after it dropped (a fold);
        ``archive``: what goes to the conversation's archive, bounded to ``archive_max_bytes`` (0: unbounded)."""
        res = self._replication.call(
            self._client, self._commit, what="commit",
            keys=CommitKeys(keys.fence, keys.state, keys.inbox, keys.attempts, keys.outbox, keys.trace, keys.dead,
                            keys.lease, keys.dlease, keys.dfence, keys.sent, keys.journal, record.stream,
                            record.dropped, keys.usage, keys.inbound, keys.blob, keys.recall, keys.recall_index),
            args=(*CommitArgs(token, expected_version, input_id, mode, blob, reply_entry, trace_entry, dead_entry,
                              lease_ms, trace_max, dead_max, ttl_ms, str(claim_ms) if claim_ms > 0 else "", peek,
                              record.entry, record.max, usage_day if tokens > 0 else "", tokens, append_at,
                              cut_at or append_at, archive.batch, archive.segment, archive_max_bytes,
                              "1" if archive.erase else ""),
                  *burst_ids))
        return CommitReply(int(res[0]), int(res[1]), int(res[2]) == 1, opt_bytes(res[3]), int(res[4] or 0),
                           blob_bytes(res[5]), ClaimReply.parse([*res[6:10], res[12]]), [bytes(e) for e in res[10] or ()],
                           text_or_none(res[11]) or "")

    def defer(self, *, keys: ConversationKeys, token: int, input_id: str, hold_ms: int) -> bool:
        """False when the fence moved (nothing changed). ``hold_ms`` 0 holds nothing (a hand-back)."""
        return int(self._defer(keys=[keys.fence, keys.lease, keys.attempts, keys.hold],
                               args=[token, input_id, max(0, hold_ms)])) == 1

    def release(self, *, fence: str, lease: str, token: int) -> bool:
        """Used for both leases: (fence, lease) or (dfence, dlease). True when the lease was ours and is gone."""
        return int(self._release(keys=[fence, lease], args=[token])) == 1

    def keep_context(self, *, fence: str, context: str, token: int, entry: bytes, ttl_ms: int) -> bool:
        """The game's last good live context, written only while ``token`` holds the fence."""
        return int(self._keep_context(keys=[fence, context], args=[token, entry, ttl_ms])) == 1

    def renew_lease(self, *, fence: str, lease: str, token: int, lease_ms: int) -> bool:
        """Shared by the drain lease (fence, lease) and the delivery lease (dfence, dlease)."""
        return int(self._renew(keys=[fence, lease], args=[token, lease_ms])) == 1

    def note_retry(self, *, keys: ConversationKeys, token: int, input_id: str, counter: str = "retries") -> int:
        """The retries counted so far on ``counter`` ("retries" or "bad"), or -1 when the fence moved."""
        return int(self._retry(keys=[keys.fence, keys.attempts], args=[token, input_id, counter]))

    def quarantine(self, *, keys: ConversationKeys, token: int, expected_version: int, record: bytes,
                   max_kept: int) -> VersionReply:
        code, version = self._quarantine(keys=[keys.fence, keys.state, keys.quarantine, keys.blob],
                                         args=[token, expected_version, record, max_kept])
        return VersionReply(int(code), int(version))

    def read_state(self, *, keys: ConversationKeys) -> tuple[bytes | None, int]:
        """The state blob (None: no state) and version, read together."""
        blob, version, _ = self._read_state(keys=[keys.state, keys.blob], args=[""])
        return blob_bytes(blob), int(version or 0)

    def record_step(self, *, keys: ConversationKeys, token: int, input_id: str, field: str, entry: bytes,
                    max_entries: int, ttl_ms: int) -> RecordReply:
        code, entries = self._record_step(keys=[keys.fence, keys.inbox, keys.journal],
                                          args=[token, input_id, field, entry, max_entries, ttl_ms])
        return RecordReply(int(code), int(entries))
