"""The durable record (``PARLEY_DATABASE_URL`` set): each commit carries its record entry, built here from the
outcome it applies (:class:`~worker.service.drain.recording.Recorder`; no I/O: the store's script appends the entry in
the same step as the state and the reply). In the list only when a database is configured."""

from __future__ import annotations

from typing import Any

from worker.envelopes.inputs import ReplyRecord
from worker.service.drain.hooks.base import DrainHook
from worker.service.drain.outcomes import Answer, Applied, DeadLettered, Notice, Outcome, Spliced, Spoken, Withheld
from worker.service.drain.recording import Recorder
from worker.service.drain.run import DrainRun
from worker.store.answers import Snapshot


class DurableRecord(DrainHook):
    """Builds the record entry of each commit; ``model``: the configured model, when a provider names none."""

    def __init__(self, model: str | None = None) -> None:
        self.recorder = Recorder(True, model)

    def entry(self, run: DrainRun, snap: Snapshot, outcome: Outcome, reply: ReplyRecord | None) -> bytes | None:
        r, cid = self.recorder, run.cid
        if isinstance(outcome, Answer):
            return r.turn(cid, [p.env for p in outcome.inputs], outcome.reply, outcome.result, outcome.trail)
        if isinstance(outcome, Notice):
            return r.applied("notice", cid, [outcome.env, *outcome.also], reply, why=outcome.why)
        if isinstance(outcome, Applied):
            return r.applied(outcome.env.kind, cid, [outcome.env])
        if isinstance(outcome, Spliced):
            spent = outcome.env.spent
            usage: dict[str, Any] = {} if spent is None else {"usage": spent.model_dump(exclude={"model"}),
                                                              "model": spent.model}
            # Parley's own input, not the player's or the game's: no inputs.
            return r.applied("compaction", cid, [], applied=outcome.applied, reason=outcome.reason,
                             kept_new=outcome.kept_new, **usage)
        if isinstance(outcome, Withheld):  # a person had taken over: no model call, no reply
            return r.applied("withheld", cid, [p.env for p in outcome.inputs])
        if isinstance(outcome, Spoken):  # the person's words: the reply's parts (its input carries no more)
            return r.applied("operator", cid, [], reply, input_id=outcome.env.message_id)
        if isinstance(outcome, DeadLettered):
            return r.dead(cid, snap.input_id or "", snap.input, outcome.reason, outcome.detail, reply)
        return None
