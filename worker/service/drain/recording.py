"""The worker's side of the durable record: each commit's entry, built from what the drain applied.

Nothing here does I/O: the entry rides in the commit (the store's script appends it to the record stream in the
same step as the state and the reply), so the record holds exactly what was committed, once. While no database is
configured the recorder is off and builds nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from worker.conversation.results import TurnResult
from worker.durable_record import entries
from worker.durable_record.entries import InputRecord, Trail
from worker.envelopes.inputs import Envelope, ReplyRecord, decode_envelope
from worker.envelopes.reply_parts import render
from worker.errors import EnvelopeError


def input_of(env: Envelope) -> InputRecord:
    """What the record keeps of one input: its id, kind and text, and the kind of media it carried."""
    media = env.media.mime_type or env.media.kind if env.media is not None else None
    return InputRecord(env.message_id, env.kind, env.text or "", media, env.pinned)


class Recorder:
    """Builds the record entry of each commit; ``on`` False (no database) builds none."""

    def __init__(self, on: bool = False, model: str | None = None) -> None:
        self.on, self.model = on, model

    def turn(self, cid: str, envs: Sequence[Envelope], reply: ReplyRecord, result: TurnResult,
             trail: Trail | None) -> bytes | None:
        """``trail``: the turn's tool calls and its usage over every round, the final one included. A turn that
        answered a game event (``respond``) is recorded as ``event_turn``, apart from the player's turns."""
        if not self.on:
            return None
        answered = len(envs) == 1 and envs[0].answered_event
        return entries.turn(cid, inputs=[input_of(e) for e in envs], reply_id=reply.reply_id, parts=[render(p) for p in reply.parts],
                            trail=trail, finish=result.finish_reason, model_calls=result.model_calls,
                            model=self.model, kind="event_turn" if answered else "turn")

    def applied(self, kind: str, cid: str, envs: Sequence[Envelope], reply: ReplyRecord | None = None,
                **fields: Any) -> bytes | None:
        """An input applied without the model: ``event``, ``reset``, ``notice``, ``compaction`` (whose splice input
        is Parley's own, not the player's or the game's: it passes no ``envs``)."""
        if not self.on:
            return None
        return entries.applied(kind, cid, inputs=[input_of(e) for e in envs],
                               reply_id=reply.reply_id if reply else None, parts=[render(p) for p in reply.parts] if reply else (),
                               **fields)

    def dead(self, cid: str, input_id: str, payload: bytes | None, reason: str, detail: str,
             apology: ReplyRecord | None) -> bytes | None:
        """A dead-lettered input: what of it decodes, why, and the apology the player got."""
        if not self.on:
            return None
        try:
            inputs = [input_of(decode_envelope(payload or b""))]
        except EnvelopeError:
            inputs = [InputRecord(input_id, "malformed")]
        return entries.applied("dead", cid, inputs=inputs, reply_id=apology.reply_id if apology else None,
                               parts=[render(p) for p in apology.parts] if apology else (), reason=reason, detail=detail[:2000])
