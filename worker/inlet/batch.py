"""One batch of the stream inlet decided: each entry accepted, a duplicate, dead (with its reason) or held, the
inputs sent to the store in waves of one round trip each (:class:`BatchAccept`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from worker.client import CheckedInput, ConversationClient
from worker.errors import InboxFullError, InputError, StoreError
from worker.inlet.messages import QueueMessage, Unacceptable, entry_span
from worker.inlet.pending import entry_sid

log = logging.getLogger("parley.inlet")

TRACE_FIELD = b"traceparent"  # optional: the producer's trace, which the input's continues


@dataclass(frozen=True)
class Parsed:
    """An entry of the batch read: its id, fields and message (or why it can never be accepted)."""

    entry_id: bytes
    fields: dict[bytes, bytes]
    message: QueueMessage | Unacceptable


@dataclass
class Decided:
    """``outcomes`` by entry id (an entry left out was not tried: the store is unavailable); ``reasons`` of the dead
    ones; ``full``: the conversations found with a full mailbox."""

    outcomes: dict[bytes, str] = field(default_factory=dict)
    reasons: dict[bytes, str] = field(default_factory=dict)
    full: set[str] = field(default_factory=set)

    def dead(self, entry_id: bytes, reason: str) -> None:
        self.outcomes[entry_id], self.reasons[entry_id] = "dead", reason


Wave = list[tuple[bytes, CheckedInput]]


def _queue(waves: list[Wave], depth: dict[str, int], eid: bytes, checked: CheckedInput) -> None:
    """Put ``checked`` in the first wave that holds no input of its conversation yet (``depth``: how many waves
    hold one)."""
    n = depth[checked.conversation_id] = depth.get(checked.conversation_id, 0) + 1
    if n > len(waves):
        waves.append([])
    waves[n - 1].append((eid, checked))


@dataclass
class BatchAccept:
    """The inputs go to the store in waves of one round trip each, a wave holding at most one entry per
    conversation: the first entry of every conversation, then the second, ... A conversation whose entry is held
    (an older entry pending elsewhere, a full mailbox) has its later entries of the batch held too, so nothing
    overtakes it; and within a wave no two inputs of a conversation can race a worker's drain. What is not a plain
    input (a reset, a scheduled input, an answered event: :attr:`~worker.client.builder.CheckedInput.plain`) is
    accepted alone, once the waves of the entries before it are in."""

    client: ConversationClient
    stream: str

    def decide(self, entries: list[Parsed], blocked: dict[str, tuple[int, int]]) -> Decided:
        """Each entry's outcome; ``blocked``: the conversations with an older entry pending outside the batch."""
        done = Decided()
        held: set[str] = set()  # held while reading the batch: the entries after it wait, not those before
        waves: list[Wave] = []
        depth: dict[str, int] = {}
        # A player's phone number and user id name one conversation: the batch's ids resolved in one round trip.
        try:
            named = self.client.resolve_many([e.message.conversation_id for e in entries
                                              if isinstance(e.message, QueueMessage)])
        except StoreError as exc:
            log.error("inlet: store unavailable, the batch is held: %s", exc)
            return done
        for entry in entries:
            eid, msg = entry.entry_id, entry.message
            if isinstance(msg, Unacceptable):
                done.dead(eid, msg.reason)
                continue
            cid = named.get(msg.conversation_id, msg.conversation_id)
            older = blocked.get(cid) or blocked.get(msg.conversation_id)
            if cid in held or (older is not None and older < entry_sid(eid)):
                held.add(cid)
                done.outcomes[eid] = "held"
                continue
            kwargs = msg.body.arguments()
            kwargs.setdefault("message_id", f"{self.stream}/{eid.decode()}")
            try:
                checked = self.client.inputs.build(msg.kind, cid, kwargs)
                if checked.plain:
                    with entry_span(cid, entry.fields.get(TRACE_FIELD)):
                        _queue(waves, depth, eid, self.client.intake.traced(checked))
                    continue
                if not self._send(waves, done):
                    return done
                waves, depth = [], {}
                if cid in done.full:
                    raise InboxFullError(cid)
                with entry_span(cid, entry.fields.get(TRACE_FIELD)):
                    accepted = self.client.intake.accept(checked)
                done.outcomes[eid] = "duplicate" if accepted.duplicate else "accepted"
            except InboxFullError:
                log.warning("inlet: a mailbox is full; entry %s held", eid.decode(), extra={"conversation_id": cid})
                held.add(cid)
                done.full.add(cid)
                done.outcomes[eid] = "held"
            except InputError as exc:
                done.dead(eid, f"{exc.field or 'input'}: {exc}" if exc.field else str(exc))
            except StoreError as exc:
                log.error("inlet: store unavailable, entry %s held with the rest of its batch: %s", eid.decode(), exc)
                return done
        self._send(waves, done)
        return done

    def _send(self, waves: list[Wave], done: Decided) -> bool:
        """Accept the waves in order; ``False`` when the store is unavailable (the rest stays pending)."""
        for wave in waves:
            try:
                self._accept_wave(wave, done)
            except StoreError as exc:
                log.error("inlet: store unavailable, entries from %s held: %s", wave[0][0].decode(), exc)
                return False
        return True

    def _accept_wave(self, wave: Wave, done: Decided) -> None:
        tried = []
        for eid, checked in wave:
            if checked.conversation_id in done.full:  # an earlier wave's entry of it found the mailbox full
                done.outcomes[eid] = "held"
            else:
                tried.append((eid, checked))
        if not tried:
            return
        results = self.client.intake.accept_many([checked for _, checked in tried])
        for (eid, checked), result in zip(tried, results, strict=True):
            if isinstance(result, InboxFullError):
                log.warning("inlet: a mailbox is full; entry %s held", eid.decode(),
                            extra={"conversation_id": checked.conversation_id})
                done.full.add(checked.conversation_id)
                done.outcomes[eid] = "held"
            else:
                done.outcomes[eid] = "duplicate" if result.duplicate else "accepted"
