"""Which inputs one chat turn takes in: a player's burst ("wait" / "which way" / "the theatre?") answered once.

Pure decisions over what the store shows the drain (the head input and the inputs queued after it); no I/O.

A burst starts at a chat message at the head of the mailbox and runs over the chat messages and game events queued
after it, up to ``burst_max_messages`` inputs; it ends before anything else (a reset, a notice, a splice, an input
that does not decode, a game event the model answers) and at its last chat message, so events after the last message
are applied after the reply, in their place. A game event the model answers (``respond``) ends a waiting burst at
once: the burst's messages are answered first, in one turn, then the event in a turn of its own
(:func:`answers_event`; its accept ends the quiet period's hold in Redis and wakes a worker, so a wait already running
ends too), so each reply answers what came before it in the mailbox and the player's turns stay apart from the game's.
A person's message (an operator's) and a reset end a waiting burst the same way: they never join one, and a person
writing or a game resetting does not wait out the player's typing. The turn waits while the burst is still open
(nothing closes it and it is not full) and the player typed within the quiet period, but never longer than
``burst_max_wait`` from the burst's first message.

Times are the producers' ``accepted_at`` against the worker's clock. A producer clock ahead of the worker's would
make a burst look newer than it is; an input stamped more than :data:`CLOCK_SKEW` in the future therefore ends the
waiting at once instead of stretching it, so skew can cost coalescing but never an answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from worker.envelopes.inputs import BURSTABLE, Envelope, InputKind, decode_envelope
from worker.errors import EnvelopeError
from worker.settings import Burst

CLOCK_SKEW = 2.0


# The burst settings (``PARLEY_BURST_*``, ``PARLEY_DOUBLE_TEXT*``) are the policy: ``quiet`` 0 turns coalescing off;
# ``reads_images`` says whether a bare photo can join a burst.
BurstPolicy = Burst


def alone(policy: BurstPolicy, p: Pending) -> bool:
    """A picture without a caption that the model cannot see becomes a short answer, not a turn: it goes alone, in
    its place."""
    env = p.env
    return (env.kind is InputKind.MESSAGE and env.media is not None and not policy.reads_images
            and not (env.text and env.text.strip()))


@dataclass(frozen=True)
class Pending:
    """A queued input the drain has decoded: its mailbox id and envelope."""

    id: str
    env: Envelope


def answers_event(inputs: Sequence[Pending]) -> bool:
    """Whether a turn's ``inputs`` are a game event the model answers (always alone: it ends a burst)."""
    return len(inputs) == 1 and inputs[0].env.answered_event


def _joins(policy: BurstPolicy, item: Pending) -> bool:
    """Whether a queued input may join a burst: a chat message or a game event, not one that goes alone (a bare
    photo the model cannot see, an event the model answers)."""
    return item.env.kind in BURSTABLE and not alone(policy, item) and not item.env.respond


@dataclass(frozen=True)
class Decision:
    """Apply ``inputs`` (the head first) in one turn now, or, with ``wait`` > 0, put the turn off that long."""

    inputs: tuple[Pending, ...]
    wait: float = 0.0


def decode_after(after: Sequence[tuple[str, bytes]], cid: str) -> list[Pending | None]:
    """The queued inputs after the head, decoded; ``None`` for one that does not decode or does not belong (the
    drain dead-letters it when it reaches the head; here it just ends a burst)."""
    out: list[Pending | None] = []
    for input_id, raw in after:
        try:
            env = decode_envelope(raw)
        except EnvelopeError:
            out.append(None)
            continue
        out.append(Pending(input_id, env) if env.message_id == input_id and env.conversation_id == cid else None)
    return out


def _run(head: Pending, after: Sequence[Pending | None], policy: BurstPolicy,
         limit: int) -> tuple[list[Pending], bool]:
    """The burstable run from ``head`` cut at its last chat message, and whether it is closed (something that is
    not burstable follows it, or the limit was reached)."""
    run, closed = [head], False
    for item in after:
        if len(run) >= limit:
            closed = True
            break
        if item is None or not _joins(policy, item):
            closed = True
            break
        run.append(item)
    while run[-1].env.kind is not InputKind.MESSAGE:
        run.pop()  # events after the last message are applied after the reply; the player may still be typing
    return run, closed or len(run) >= limit


def decide(head: Pending, after: Sequence[Pending | None], policy: BurstPolicy, now: float,
           *, complete: bool) -> Decision:
    """What to do with a chat message at the head. ``after`` are the inputs queued after it as the store showed
    them; ``complete`` says whether that is the whole mailbox (else more may follow: the burst is full anyway)."""
    if policy.quiet <= 0 or alone(policy, head):
        return Decision((head,))
    run, closed = _run(head, after, policy, policy.max_messages)
    if closed or not complete:
        return Decision(tuple(run))
    messages = [p.env.accepted_at for p in run if p.env.kind is InputKind.MESSAGE]
    first, last = messages[0], messages[-1]
    if max(messages) > now + CLOCK_SKEW:
        return Decision(tuple(run))
    quiet_left = policy.quiet - (now - last)
    wait_left = policy.max_wait - (now - first)
    wait = min(quiet_left, wait_left)
    return Decision(tuple(run), wait if wait > 0 else 0.0)


def extend(burst: Sequence[Pending], after: Sequence[Pending | None], policy: BurstPolicy) -> tuple[Pending, ...]:
    """The burst with the chat messages (and the events before and between them) that arrived after it, for a
    double-text merge; ``after`` are the inputs queued after the burst's last input. Unchanged when no new chat
    message came."""
    run: list[Pending] = []
    for item in after:
        if len(burst) + len(run) >= policy.max_messages or item is None or not _joins(policy, item):
            break
        run.append(item)
    while run and run[-1].env.kind is not InputKind.MESSAGE:
        run.pop()
    return tuple(burst) + tuple(run)


def recorded(head: Pending, after: Sequence[Pending | None], ids: Sequence[str]) -> tuple[Pending, ...] | None:
    """The burst a crashed run of this turn recorded (``ids``, head first), rebuilt from the queue; ``None`` when
    the queue does not hold them in that order (then the burst is decided afresh)."""
    if not ids or ids[0] != head.id or len(ids) - 1 > len(after):
        return None
    inputs = [head]
    for want, item in zip(ids[1:], after, strict=False):
        if item is None or item.id != want:
            return None
        inputs.append(item)
    return tuple(inputs)
