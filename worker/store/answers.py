"""What the store's methods answer: plain frozen values, one kind per answer, shared by the store's parts, the
protocols of :mod:`worker.store.interfaces` and the callers.

- The drain (:class:`~worker.store.interfaces.DrainStore`): :class:`AcceptResult`, :class:`Begin` with its
  :class:`Snapshot`, :class:`CommitResult`, :class:`StateRead`, :class:`JournalRead`.
- Delivery (:class:`~worker.store.interfaces.DeliveryStore`): :class:`OutboxHead`, :class:`InflightOutcome`; the status
  webhooks: :class:`StatusRecorded`, :class:`MessageStatus`; the shared pace: :class:`Pace`.
- Operations: :class:`Backlog` (autoscaling), :class:`StreamEntry` and :class:`RecordBacklog` (the durable record's
  exporter).
- And one value the producers hand in: :class:`WakePush`, the wake-up the accept pushes itself.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AcceptResult:
    """What accepting an input did: ``accepted`` (queued), or ``duplicate`` (its id was seen before); ``depth``: the
    inputs waiting after it; ``ended_hold``: it ended a burst's quiet period (a game event the model answers), so a
    worker should be woken now."""

    accepted: bool
    duplicate: bool
    depth: int
    ended_hold: bool = False
    woken: bool = False  # the accept pushed the caller's WakePush: a worker is woken already


@dataclass(frozen=True)
class WakePush:
    """A wake-up the accept script pushes itself onto the broker's queue (``queue``, a list on the same Redis), in
    the same step, when the input needs one (see :meth:`~worker.store.accepts.AcceptStore.accept`): ``message`` is
    the Celery message, built by :class:`worker.queue.wakeup.AcceptWake`; ``every``: every accepted input pushes it, not
    only the one that needs a wake-up (the producer does not coalesce wake-ups)."""

    queue: str
    message: bytes
    every: bool = False


@dataclass(frozen=True)
class Snapshot:
    """The head of the mailbox and the state, read together under the lease."""

    input: bytes | None
    input_id: str | None
    state: bytes | None
    version: int
    after: tuple[tuple[str, bytes], ...] = ()  # (id, envelope) of inputs after the head, when asked for (a burst)
    # The stored state's tag ('' when none): it changes with every write of the blob. ``state`` is None while the
    # tag is set when the caller said it holds that state already (``begin(have=tag)``): the blob was not sent.
    tag: str = ""
    journal: bool = True  # whether the head's turn journal may hold entries (False: known empty, nothing to read)
    # The conversation's pause read with the snapshot (``begin`` reads it; a commit's next input does not: then
    # ``pause_read`` is False and the drain reads the pause at the turn point, see worker.service.drain.hooks).
    pause_read: bool = False
    pause: Pause | None = None
    opted_out: bool = False  # with ``pause_read``: the player had opted out when the begin read it


@dataclass(frozen=True)
class Begin:
    """The start of a drain: ``status`` is ``ok`` (the lease is ours: ``token``, the head input and the state in
    ``snapshot``, ``attempts`` at the head), ``empty``, ``busy`` (another worker holds the lease) or ``held``
    (a failing input waits for its scheduled retry)."""

    status: str
    token: int = 0
    snapshot: Snapshot | None = None
    attempts: int = 0


@dataclass(frozen=True)
class CommitResult:
    """``version`` and ``depth`` after the commit: ``released`` when the mailbox was empty and the lease was given
    up, else the next input (``next``) with the attempts counted at it."""

    version: int
    depth: int
    released: bool = False
    next: Snapshot | None = None
    next_attempts: int = 0
    delivery: tuple[int, OutboxHead] | None = None  # with ``claim_delivery_ms``: the delivery token and claimed head
    tag: str = ""  # the stored state's tag after the commit ('' when there is no state)


@dataclass(frozen=True)
class Pause:
    """A conversation's pause (a person has taken it over): ``until`` (seconds since the epoch) when it ends by
    itself, None when only a resume ends it."""

    until: float | None = None

    @classmethod
    def stored(cls, raw: bytes | None, now_ms: int) -> Pause | None:
        """The pause a ``paused`` key's value (``raw``: the ms it ends, ``0`` until resumed; None: no key) stands for
        at ``now_ms``: None when there is none or a timed one has ended (the key's TTL ends it within a millisecond
        or so)."""
        if raw is None:
            return None
        until_ms = int(raw or 0)
        if until_ms and until_ms <= now_ms:
            return None
        return cls(until_ms / 1000 if until_ms else None)


@dataclass(frozen=True)
class StateRead:
    """The state read without a lease (compaction, inspection): it may be outdated as soon as it is read."""

    blob: bytes | None
    version: int


@dataclass(frozen=True)
class JournalRead:
    """One input's turn journal as stored: model rounds by step, tool results by (step, call id); encoded
    entries (the core's :mod:`worker.conversation.turn_journal` codecs read them)."""

    rounds: dict[int, bytes]
    results: dict[tuple[int, str], bytes]
    burst: tuple[str, ...] | None = None  # the ids of the inputs the turn takes in, when it recorded them


@dataclass(frozen=True)
class OutboxHead:
    """The outbox head claimed for a send: the reply and the part to send next (already marked in flight).
    ``crashed_in_window`` is true when that part was left in flight by an earlier deliverer that never marked it
    sent: a worker died between the send and the mark (or just before the send), so the part may already have
    reached the user. ``last_inbound`` is when the player last wrote (seconds since the epoch; None when no
    message is known), read with the claim: the customer-service window the send must respect. It can only be
    older than the truth by the time the send takes (the time only moves forward), so it errs on the strict side."""

    record: bytes
    reply_id: str
    part: int
    crashed_in_window: bool
    last_inbound: float | None


@dataclass(frozen=True)
class InflightOutcome:
    """What is known of a part left in flight by a crash (see
    :meth:`~worker.store.outbox.OutboxStore.inflight_outcome`): the best status webhook recorded for it and the
    provider message id it named (``None`` when none came), and how long ago (ms) a deliverer first found the part
    left in flight."""

    status: str | None
    provider_id: str | None
    waited_ms: int


@dataclass(frozen=True)
class StatusRecorded:
    """What recording one status webhook did: ``moved`` when it moved the message's status forward (a late or
    repeated one does not), ``latest`` the status the message has now, ``for_part`` when it was also kept as
    proof that the reply part it names (still in flight) reached the provider."""

    moved: bool
    latest: str
    for_part: bool = False


@dataclass(frozen=True)
class MessageStatus:
    """The latest delivery status of one message we sent (by the provider's message id): ``status`` as WhatsApp
    names it (sent, delivered, read, failed, ...), ``at_ms`` when it was recorded, ``detail`` the errors of a
    failed one."""

    provider_id: str
    status: str
    at_ms: int
    detail: str = ""


@dataclass(frozen=True)
class Pace:
    """One answer of the pacer: ``reserved`` when the send may go after ``wait`` seconds (the slot is taken);
    otherwise nothing was taken: ask again after ``wait`` (the recipient's pair budget needs it, or the number's
    next slot is further away than the caller would sleep). ``by`` names the limit that set the wait: ``number``,
    ``recipient`` or ``none``."""

    reserved: bool
    wait: float
    by: str


@dataclass(frozen=True)
class Backlog:
    """``waiting``: conversations with inputs waiting (counted in the sample, scaled to the whole set when it is
    larger); ``oldest_age_s``: age of the oldest waiting input found (0 when none waits); ``sampled`` of ``total``
    conversations in the sweeper's set were probed."""

    waiting: int
    oldest_age_s: float
    sampled: int
    total: int


@dataclass(frozen=True)
class StreamEntry:
    """One entry of a record stream: ``entry_id`` (the stream's, ``<ms>-<n>``), ``record_id`` (the row's unique key),
    ``raw`` (the msgpack record) and ``extra`` (what the script added: a delivered reply's provider ids)."""

    entry_id: bytes
    record_id: str
    raw: bytes
    extra: str | None

    @property
    def ms(self) -> int:
        """When the entry was appended (Redis's clock, from the stream id)."""
        return int(self.entry_id.split(b"-", 1)[0])


@dataclass(frozen=True)
class RecordBacklog:
    """What waits in the record streams: ``entries`` in all, the ``oldest_age_s`` of the oldest, and ``dropped``
    (entries the cap threw away before they were exported, since the streams began)."""

    entries: int
    oldest_age_s: float
    dropped: int
    dropping: tuple[str, ...] = ()  # the streams whose cap dropped entries (their counters count towards ``dropped``)
