"""What deciding about the head of a mailbox comes to: one value per kind, which the drainer applies.

The turn and the other deciders (:mod:`~worker.service.drain.decide`, :mod:`~worker.service.drain.turn`, the
hooks) read the store but never write what applies an input: they return one of these, and
:class:`~worker.service.drain.apply.Applier` makes it happen with the store call of its kind (a commit, a
deferral, a hold). So every way an input can leave the mailbox, or stay in it, is named here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from worker.conversation.chat import State
from worker.conversation.messages import Message
from worker.conversation.resident import Resident
from worker.conversation.results import TurnResult
from worker.durable_record.entries import Trail
from worker.envelopes.inputs import Envelope, ReplyRecord
from worker.errors import StateDecodeError
from worker.service.drain.burst import Pending


@dataclass(frozen=True)
class Quarantine:
    """Set the unusable stored ``blob`` aside before the commit that follows (the conversation starts fresh)."""

    blob: bytes
    reason: str
    detail: str


def quarantine_of(state: State, problem: StateDecodeError | None) -> Quarantine | None:
    """The quarantine a turn or an event that found ``state`` unusable (``problem``) comes with, if any (a state
    this worker held decoded had no problem)."""
    if problem is None or not isinstance(state, bytes) or not state:
        return None
    return Quarantine(state, problem.reason, problem.detail)


@dataclass(frozen=True)
class Answer:
    """A chat turn's answer: ``inputs`` (the head, then the burst it took in) applied with the model's reply."""

    inputs: tuple[Pending, ...]
    result: TurnResult
    reply: ReplyRecord
    data: bytes  # ``reply`` encoded, as the outbox holds it
    trace: dict[str, Any]
    trail: Trail
    started: float  # time.perf_counter() when the turn began
    quarantine: Quarantine | None = None

    @property
    def also(self) -> list[str]:
        """The burst's inputs after the head: the commit applies them too."""
        return [p.id for p in self.inputs[1:]]


@dataclass(frozen=True)
class Notice:
    """A fixed short answer (``text``, for ``why``) in the place of ``env`` and of the inputs ``also`` after it:
    no model call, the state unchanged."""

    env: Envelope
    text: str
    why: str
    also: Sequence[Envelope] = ()


@dataclass(frozen=True)
class Applied:
    """An event or a reset applied without the model: ``state`` the new blob (``b""``: none). ``departed``: what
    left the history (archived by the commit); ``erase``: the archive is erased (a reset with ``forget``)."""

    env: Envelope
    state: bytes
    trace: dict[str, Any]
    resident: Resident | None = None
    quarantine: Quarantine | None = None
    needs_compaction: bool = False
    pinned_dropped: int = 0
    departed: tuple[Message, ...] = ()
    erase: bool = False


@dataclass(frozen=True)
class Spliced:
    """A compaction laid onto the newest state (``state`` None: it was stale, the state stays)."""

    env: Envelope
    state: bytes | None
    applied: bool
    reason: str
    kept_new: int
    pinned_dropped: int
    departed: tuple[Message, ...] = ()  # what the applied splice took out of the history (archived by its commit)


@dataclass(frozen=True)
class DeadLettered:
    """Give the head input up (``kind``: the envelope's, or ``malformed``), with the reason ops see."""

    kind: str
    reason: str
    detail: str
    attempts: int


@dataclass(frozen=True)
class Defer:
    """A burst still being typed: give the lease up, hold the conversation ``wait`` seconds, then drain again."""

    inputs: tuple[Pending, ...]
    wait: float


@dataclass(frozen=True)
class HandBack:
    """The drain had its share (fairness): give the conversation back to the queue with inputs waiting."""

    input_id: str


@dataclass(frozen=True)
class Retry:
    """Try the head input again later: hold the conversation for a backoff set by ``retries`` (or the provider's
    ``retry_after``) and raise :class:`~worker.service.config.RetryLater`."""

    retries: int
    reason: str
    retry_after: float | None = None


@dataclass(frozen=True)
class Withheld:
    """A person has taken the conversation over (paused until ``until``, None: until resumed): ``inputs`` (the
    turn's, a burst included) enter the state with no model call and no reply. The pause hook names the inputs
    (``state`` None); the turn fills in the state they make (see :mod:`worker.service.drain.handoff`). A withheld
    notice keeps ``state`` None: the state stays as it was."""

    inputs: tuple[Pending, ...]
    until: float | None
    state: bytes | None = None
    resident: Resident | None = None
    quarantine: Quarantine | None = None
    needs_compaction: bool = False
    pinned_dropped: int = 0
    departed: tuple[Message, ...] = ()

    @property
    def also(self) -> list[str]:
        return [p.id for p in self.inputs[1:]]


@dataclass(frozen=True)
class Spoken:
    """An operator's message (``env``): sent in order like a reply (``reply``, ``data`` encoded), its words added to
    the state (``state``) as the assistant's side, marked as a person's."""

    env: Envelope
    state: bytes
    reply: ReplyRecord
    data: bytes
    resident: Resident | None = None
    quarantine: Quarantine | None = None
    needs_compaction: bool = False
    pinned_dropped: int = 0
    departed: tuple[Message, ...] = ()


Outcome = Answer | Notice | Applied | Spliced | DeadLettered | Defer | HandBack | Retry | Withheld | Spoken
"""Every outcome the drainer applies (a :class:`Quarantine` rides in the commit it precedes)."""
