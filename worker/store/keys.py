"""Every Redis key Parley uses, built in one place.

All keys of one conversation share the hash tag ``{<conversation id>}``, so they live in one Redis
Cluster slot and one Lua script may touch them all. Conversation ids are validated before they become
part of a key: no id can produce another conversation's key or a glob pattern.

Per conversation (``{prefix}:{{cid}}:<name>``):

==============  ==================================================================================
``state``       hash: ``version`` (bumped by every commit), ``tag`` (names the stored blob, new with every write of
                it), ``blen`` (the blob's length in bytes), ``rbytes`` (the bytes of ``recall``'s batches);
                ``blob``: the opaque state of a conversation last written whole in the older layout (its next write
                moves it to ``blob`` below)
``recall``      list: the archive, what left the verbatim history: one codec batch
                (:mod:`worker.conversation.recall.codec`) per commit that archived something, oldest first;
                bounded by ``PARLEY_RECALL_MAX_BYTES`` (the oldest batches go)
``recall_index`` list: one :class:`~worker.conversation.recall.index.SearchIndex` segment per batch of ``recall``,
                at the same position (they go together)
``blob``        list: the opaque state in parts, joined when read: a base, then the frames turns appended (a turn
                pushes what it adds; a whole write replaces the list), see :mod:`worker.conversation.state`
``inbox``       list: accepted inputs, oldest first; each entry is ``<input id>\\n<envelope bytes>``
``seen``        zset: input ids accepted (score: ms), bounded by count and age — producer dedupe
``fence``       counter: the fencing token of the latest lease
``lease``       string: the token of the worker applying inputs (expires)
``attempts``    hash: input id -> attempts so far (poison-input detection)
``outbox``      list: replies to deliver, oldest first; ``<reply id>\\n<record bytes>``
``sent``        hash: delivery progress of the outbox head (``reply_id``, ``part``, ``inflight``, ``ids``; for
                the part in flight also the best status webhook seen for it, ``seen_part`` / ``seen`` /
                ``seen_id``, and when a deliverer first found it left in flight, ``suspect_part`` /
                ``suspect_at``)
``dfence``      counter: the fencing token of the latest delivery lease
``dlease``      string: the token of the worker delivering replies
``delivered``   list (capped): ``<reply id>\\t<provider message ids>`` of delivered replies
``trace``       list (capped): what happened, one msgpack entry per applied input
``quarantine``  list (capped): state blobs set aside as unusable, with the reason
``dead``        list (capped): dead letters (inputs and replies) with the reason
``compacting``  string: set while a compaction is being computed (expires)
``hold``        string: set while the head input waits to be retried (``1``; expires when the retry is due) or a
                burst's quiet period is waited out (``b``; a game event the model answers ends it when accepted)
``statuses``    hash: provider message id -> its latest delivery status (``<status>\t<ms>\t<detail>``); a
                status only moves forward (sent < delivered < read; failed is final)
``statusorder`` zset: the provider message ids of ``statuses`` by when their first status came (ms):
                bounds ``statuses`` to the most recent ones
``journal``     hash: the head input's turn journal (model rounds, tool results), deleted by its commit
``inbound``     string: ms of the player's last message accepted (opens WhatsApp's customer-service window)
``lastmsg``     string: the WhatsApp id (``wamid.``...) of the player's last message accepted: what an operator's
                reaction reacts to
``usage``       hash: UTC day (``YYYY-MM-DD``) -> tokens the conversation's turns used that day (the daily budget);
                expires three days after the last turn
``timers``      zset: message ids of inputs held until they are due (score: due ms), see :mod:`worker.store.timers`
``timed``       hash: message id -> the held input (two flag characters, then its mailbox entry)
``context``     string: the game's last good live context (``<unix time>\n<text>``), used by a turn whose fetch
                failed while it is young enough; never part of the state; expires after
                ``PARLEY_CONTEXT_MAX_AGE_SECONDS``
``paused``      string: a person has taken the conversation over (``parley pause``): ms when the pause ends, ``0``
                for none; expires with a timed pause (see :mod:`worker.store.pauses`)
``recall``      list: the conversation's archive, one codec batch of archived messages per commit that dropped
                some from the history (see :mod:`worker.conversation.recall.codec`)
``recall_index`` list: search index segments (``SearchIndex.to_bytes()``) over ``recall``'s messages, one per
                commit that archived something, in the same order
``tomb``        zset: input ids of a deleted conversation (score: ms of the delete), so Meta's retries of
                its old webhooks dedupe; not one of :data:`NAMES` (delete keeps it), expires on its own
``optout``      hash: the player's opt-out (``stop``: everything business-initiated; ``marketing``: templates),
                the ms each was made; not one of :data:`NAMES`: a delete and the idle TTL keep it, only an opt-in
                clears it (see :mod:`worker.store.identities`)
==============  ==================================================================================

Global (no hash tag; never touched inside a per-conversation script): ``{prefix}:pending`` (zset:
conversations that may have work, for the sweeper), ``{prefix}:dead-index`` (zset: conversations with dead
letters), ``{prefix}:timers-due`` (zset: conversations holding timers, scored by the earliest due ms, for the timer
loop), ``{prefix}:lock:<name>`` (short locks), ``{prefix}:record-on`` (the durable record is on: its stream
cap, written by ``parley db upgrade`` and the exporter, read by every delete), ``{prefix}:record-deletes`` (zset: the
deletes the exporter has yet to erase from PostgreSQL) and ``{prefix}:status-ingress`` (an
ingress records status webhooks: set when it starts and as statuses come, expiring a day after the last) and
``{prefix}:paused`` (zset: paused conversations, scored by the ms their pause ends, ``+inf`` for none: the gauge)
and ``{prefix}:trace-id-key`` (the random key of the pseudonyms traces show for conversation ids, when
``PARLEY_TRACE_ID_KEY`` is unset: created once, never expires, see :mod:`worker.store.trace_ids`).

The durable record (only while ``PARLEY_DATABASE_URL`` is set): ``{prefix}:{{rec.<n>}}:records`` (stream: what each
commit, status and delete did, for the exporter to copy to PostgreSQL) and ``{prefix}:{{rec.<n>}}:dropped`` (counter:
records the cap dropped before they were exported). On a standalone Redis there is one such stream (``n`` 0); on a
Cluster one per slot, each ``rec.<n>`` chosen to hash to its slot, so a conversation's scripts can append to the
stream of their own slot (see :class:`RecordKeys`).

Identities (``{prefix}:{{ids}}:<name>``, one hash tag for all of them, so one transaction may read
and move the links of a phone number and a business-scoped user id together, on a Cluster too; see
:mod:`worker.store.identities`): ``link:<id>`` (string: ``<ms>\t<conversation id>``, the conversation a phone number
or a BSUID belongs to, and since when), ``addr:<cid>`` (hash: ``phone``, ``user_id``, the player's ids as the latest
webhook carried them, ``was``: ids they replaced; a reply's recipient is resolved from it when it is sent). Both
expire with the idle TTL and go with a delete.

Per sender phone number (``{prefix}:{{wa:<phone number id>}}:<name>``, a hash tag of their own, so the pacing script
touches one slot): ``rate`` (the number's throughput bucket) and ``to:<recipient>`` (the pair bucket of one
recipient, shared by every conversation that writes to them). Both expire on their own once idle.

Per token of the producers' API with a rate (``{prefix}:{{api:<digest>}}:rate``, the digest of the token, never
the token): the token's request bucket, shared by every ingress process; it expires on its own once idle.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
from dataclasses import dataclass, field

from worker.envelopes.addresses import ID_PATTERN, validate_conversation_id

NAMES = ("state", "inbox", "seen", "fence", "lease", "attempts", "outbox", "sent", "dfence", "dlease",
         "delivered", "trace", "quarantine", "dead", "compacting", "statuses", "statusorder", "hold",
         "journal", "inbound", "usage", "timers", "timed", "context", "paused", "lastmsg", "blob",
         "recall", "recall_index")


@dataclass(frozen=True)
class ConversationKeys:
    """The keys of one conversation, one attribute per name in :data:`NAMES` (typed, so a misspelt key name
    fails the type check rather than at run time)."""

    prefix: str
    cid: str
    state: str = field(init=False)
    inbox: str = field(init=False)
    seen: str = field(init=False)
    fence: str = field(init=False)
    lease: str = field(init=False)
    attempts: str = field(init=False)
    outbox: str = field(init=False)
    sent: str = field(init=False)
    dfence: str = field(init=False)
    dlease: str = field(init=False)
    delivered: str = field(init=False)
    trace: str = field(init=False)
    quarantine: str = field(init=False)
    dead: str = field(init=False)
    compacting: str = field(init=False)
    statuses: str = field(init=False)
    statusorder: str = field(init=False)
    hold: str = field(init=False)
    journal: str = field(init=False)
    inbound: str = field(init=False)
    usage: str = field(init=False)
    timers: str = field(init=False)
    timed: str = field(init=False)
    context: str = field(init=False)
    paused: str = field(init=False)
    lastmsg: str = field(init=False)
    blob: str = field(init=False)
    recall: str = field(init=False)
    recall_index: str = field(init=False)

    def __post_init__(self) -> None:
        validate_conversation_id(self.cid)
        for name in NAMES:
            object.__setattr__(self, name, self.key(name))

    def key(self, name: str) -> str:
        return f"{self.prefix}:{{{self.cid}}}:{name}"

    def all(self) -> list[str]:
        """Every key of the conversation (for delete and idle TTL), but the tombstone."""
        return [getattr(self, n) for n in NAMES]

    @property
    def tomb(self) -> str:
        """The tombstone a delete leaves: outside :data:`NAMES`, because a delete keeps it."""
        return self.key("tomb")

    @property
    def opt_out(self) -> str:
        """The player's opt-out marker (hash: ``stop`` and ``marketing``, the ms each was made): outside
        :data:`NAMES` and the idle TTL's keys, because a delete, the idle TTL and the tombstone must leave it."""
        return self.key("optout")


@dataclass(frozen=True)
class InletKeys:
    """The stream inlet's keys beside its stream (``PARLEY_INLET_STREAM``): ``<stream>:dead`` (stream: the entries it
    could not accept, with their reasons) and the pending index (zset: one member ``<conversation id>\\0<entry id,
    both parts zero-padded>`` of score 0 per entry of the group that is pending, so one conversation's pending entries
    are one lexicographic range, oldest first). The index shares the stream's slot on a Cluster: it is tagged with
    the stream's own hash tag, or with the stream's whole name when it has none (the slot of an untagged key)."""

    stream: str

    @property
    def dead(self) -> str:
        return f"{self.stream}:dead"

    @property
    def pending(self) -> str:
        start = self.stream.find("{")
        end = self.stream.find("}", start + 1) if start >= 0 else -1
        if end > start + 1:  # the stream has a hash tag: it decides the slot
            return f"{self.stream}:pending"
        return f"{{{self.stream}}}:pending"


@dataclass(frozen=True)
class GlobalKeys:
    """Keys that span conversations."""

    prefix: str

    @property
    def pending(self) -> str:
        return f"{self.prefix}:pending"

    @property
    def dead_index(self) -> str:
        return f"{self.prefix}:dead-index"

    @property
    def timers_due(self) -> str:
        """Conversations holding timers, scored by their earliest due ms (a score may be early, never late)."""
        return f"{self.prefix}:timers-due"

    def lock(self, name: str) -> str:
        return f"{self.prefix}:lock:{name}"

    @property
    def record_on(self) -> str:
        """The deployment keeps a durable record: the stream cap, set by ``parley db upgrade`` and the exporter
        (no expiry), so a process without ``PARLEY_DATABASE_URL`` still records its deletes."""
        return f"{self.prefix}:record-on"

    @property
    def record_deletes(self) -> str:
        """Deletes the exporter has yet to erase from PostgreSQL (zset: conversation id, scored by the stream
        position of its delete record), so one whose record the stream's cap dropped is still erased."""
        return f"{self.prefix}:record-deletes"

    @property
    def status_ingress(self) -> str:
        """A webhook ingress records WhatsApp's status webhooks (set by it, expiring a day after it last did)."""
        return f"{self.prefix}:status-ingress"

    @property
    def paused(self) -> str:
        """Paused conversations (zset, scored by the ms each pause ends, ``+inf`` for none): what the
        ``parley_paused_conversations`` gauge counts, fleet-wide."""
        return f"{self.prefix}:paused"

    @property
    def trace_id_key(self) -> str:
        """The fleet's key for the pseudonyms of conversation ids in traces (string, hex; created once)."""
        return f"{self.prefix}:trace-id-key"


@dataclass(frozen=True)
class IdentityKeys:
    """The identity links and the players' addresses (all in the slot of the ``ids`` hash tag)."""

    prefix: str

    def link(self, ident: str) -> str:
        """The conversation a phone number or a business-scoped user id belongs to."""
        return f"{self.prefix}:{{ids}}:link:{_safe(ident)}"

    def address(self, cid: str) -> str:
        """The player's current ids (``phone``, ``user_id``) and the ids they replaced (``was``)."""
        return f"{self.prefix}:{{ids}}:addr:{validate_conversation_id(cid)}"


@dataclass(frozen=True)
class PaceKeys:
    """The pacing buckets of one sender phone number, all under its own hash tag: one pacing script may touch the
    number's bucket and a recipient's together, on a Cluster too."""

    prefix: str
    sender: str

    @property
    def rate(self) -> str:
        return f"{self.prefix}:{{wa:{_safe(self.sender)}}}:rate"

    def recipient(self, recipient: str) -> str:
        return f"{self.prefix}:{{wa:{_safe(self.sender)}}}:to:{_safe(recipient)}"


@dataclass(frozen=True)
class ApiTokenKeys:
    """The rate bucket of one token of the producers' API (:attr:`worker.settings.api_tokens.Grant.digest`)."""

    prefix: str
    digest: str

    @property
    def rate(self) -> str:
        return f"{self.prefix}:{{api:{_safe(self.digest)}}}:rate"


def _safe(part: str) -> str:
    """``part`` as it is when it cannot escape its key (phone numbers, business-scoped ids), else its digest: a
    recipient is any string a producer passed, and a brace in it would move the key to another slot."""
    if ID_PATTERN.fullmatch(part):
        return part
    return "h." + hashlib.sha256(part.encode("utf-8", "surrogatepass")).hexdigest()[:32]


SLOTS = 16384


def key_slot(tag: str) -> int:
    """The Redis Cluster slot of a hash tag (CRC16/XMODEM modulo 16384, as Redis computes it)."""
    return binascii.crc_hqx(tag.encode(), 0) % SLOTS


@functools.cache
def _slot_tags() -> tuple[str, ...]:
    """For each slot, the first ``rec.<n>`` that hashes to it (about 170,000 CRCs, ~0.1 s, once per process)."""
    tags: list[str | None] = [None] * SLOTS
    left, n = SLOTS, 0
    while left:
        tag = f"rec.{n}"
        slot = key_slot(tag)
        if tags[slot] is None:
            tags[slot] = tag
            left -= 1
        n += 1
    return tuple(t for t in tags if t is not None)


@dataclass(frozen=True)
class RecordKeys:
    """The record streams: one on a standalone Redis; on a Cluster one per slot, in the slot of the conversations
    that append to it (a script may only touch keys of one slot)."""

    prefix: str
    clustered: bool = False

    def _tag_for(self, cid: str) -> str:
        return _slot_tags()[key_slot(cid)] if self.clustered else "rec.0"

    def stream(self, cid: str) -> str:
        """The stream the scripts of conversation ``cid`` append to."""
        return self._stream(self._tag_for(cid))

    def dropped(self, cid: str) -> str:
        """The counter of records dropped from ``cid``'s stream by its cap."""
        return self.dropped_of(self.stream(cid))

    def streams(self) -> list[str]:
        """Every stream the exporter reads."""
        return [self._stream(t) for t in (_slot_tags() if self.clustered else ("rec.0",))]

    def _stream(self, tag: str) -> str:
        return f"{self.prefix}:{{{tag}}}:records"

    @staticmethod
    def dropped_of(stream: str) -> str:
        return stream.removesuffix(":records") + ":dropped"
