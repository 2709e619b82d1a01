"""One chat turn under the drain's lease: the inputs it takes in (a burst) become the turn's messages, the model
answers, and the state, the reply and the trace are committed together with every input the turn applied.

Double texts (``PARLEY_DOUBLE_TEXT=merge``): when chat messages arrived behind the turn while the model answered,
the answer is stale. It is thrown away (counted) and the turn runs again over the same state with them included,
at most ``max_merges`` times. Only an answer whose run called no tools is thrown away: a tool may have acted on
the game, and the model must see what it did, so such an answer goes out and the new messages are answered next
(as with ``queue``). Since such a run recorded nothing in the journal, a crash after a merge replays nothing stale:
the journal holds the merged burst's inputs, recorded before the new run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from worker import metrics
from worker.conversation import messages as msgs
from worker.conversation.chat import State, TurnResult
from worker.conversation.messages import Message
from worker.conversation.model import Attachment
from worker.conversation.tools import turn_context
from worker.delivery.split import split_message
from worker.envelopes import ReplyRecord
from worker.service import burst
from worker.service.burst import Pending
from worker.service.config import count_pinned_dropped
from worker.service.journal import StoreJournal
from worker.service.media import Prepared
from worker.service.recovery import usage_trace
from worker.store.results import CommitResult, Snapshot

if TYPE_CHECKING:
    from worker.service.drain import Drainer, _Run

log = logging.getLogger("parley.service")


# Bound once: looking a labelled child up costs more than the increment (every turn).
_MESSAGES_APPLIED = metrics.INPUTS.labels("message", "applied")

# What the model reads for a photo that could not be loaded, when other messages of a burst carry the turn.
UNLOADED_PHOTO = "[The player sent a photo that could not be loaded]"


class TurnRunner:
    """Runs one turn for a drainer: ``run(inputs, snap)`` -> the commit."""

    def __init__(self, drainer: Drainer, run: _Run, journal: StoreJournal) -> None:
        self.d, self.r, self.journal = drainer, run, journal
        self._prepared: dict[str, Prepared] = {}  # by input id: a merge does not fetch a photo again
        self._photos = drainer.media.turn_photos()  # the bytes of photos this turn may hold

    def run(self, inputs: tuple[Pending, ...], snap: Snapshot) -> CommitResult:
        d, run = self.d, self.r
        started = time.perf_counter()
        state, version = d.state_of(run, snap), snap.version
        budget = d.config.daily_token_budget
        if budget and d.store.tokens_today(run.cid) >= budget:  # abuse and cost control: no model call
            metrics.BUDGET_REFUSALS.inc()
            return d._notice(run, inputs[0].env, version, d.config.token_budget_reply, "budget",
                             also=[p.env for p in inputs[1:]])
        if len(inputs) == 1:
            notice = self._prepare(inputs[0]).notice
            if notice is not None:  # a photo alone that the model cannot see: the short answer, no turn
                return d._notice(run, inputs[0].env, version, notice, "unreadable_media")
        with d.presence.typing(run.cid, inputs[-1].id):  # refreshed while the model thinks; best effort
            result, inputs, merges = self._answer(inputs, state)
        state, version = d._quarantine_if(run, state, version, result.state_problem)
        head, last = inputs[0], inputs[-1]
        record = ReplyRecord(reply_id=head.id, conversation_id=run.cid, recipient=last.env.recipient or run.cid,
                             parts=split_message(result.reply), reply_to=last.env.reply_to)
        trace: dict[str, Any] = {"user": last.env.text, "reply": result.reply[: d.config.trace_reply_chars],
                 "finish": result.finish_reason, "model_calls": result.model_calls, "tool_calls": result.tool_calls,
                 "replayed": [result.replayed_rounds, result.replayed_results], **usage_trace(result.usage),
                 "reset": result.reset, "parts": len(record.parts)}
        if len(inputs) > 1:
            trace["burst"] = [p.id for p in inputs]
        if merges:
            trace["merges"] = merges
        trail = self.journal.trail
        trail.usage.add(result.usage)  # the final round (the journal saw only the rounds that called tools)
        data = record.to_bytes()
        # Inline delivery starts in the commit that ends the drain (if it does): one round trip fewer per reply.
        done = d._commit(run, version, head.env, result.state, data, trace,
                         claim_delivery=d.config.deliver_inline, also=[p.id for p in inputs[1:]],
                         resident=result.resident, tokens=trail.usage.total,
                         record=d.recorder.turn(run.cid, [p.env for p in inputs], record, result, trail))
        metrics.TURN_SECONDS.observe(time.perf_counter() - started)
        kinds = [p.env.kind for p in inputs]
        _MESSAGES_APPLIED.inc(kinds.count("message"))
        if "event" in kinds:
            metrics.INPUTS.labels("event", "applied").inc(kinds.count("event"))
        metrics.BURST_INPUTS.observe(len(inputs))
        count_pinned_dropped(result.pinned_dropped)
        log.info("turn applied", extra={"conversation_id": run.cid, "message_id": head.id, "kind": "message",
                                        "inputs": len(inputs), "parts": len(record.parts),
                                        "finish": result.finish_reason})
        d.after_reply(run, done, (data, record))
        if result.needs_compaction:
            d.ask_compaction(run)
        return done

    def _answer(self, inputs: tuple[Pending, ...], state: State) -> tuple[TurnResult, tuple[Pending, ...], int]:
        """The model's answer to ``inputs``, run again with the double texts that arrived meanwhile (merge)."""
        policy = self.d.config.burst
        merges = 0
        while True:
            result = self._once(inputs, state)
            if not policy.merge or merges >= policy.max_merges or result.tool_calls:
                return result, inputs, merges
            newer = self.d.store.peek(self.r.cid, len(inputs), policy.max_messages - len(inputs))
            grown = burst.extend(inputs, burst.decode_after(newer, self.r.cid), policy)
            if len(grown) == len(inputs):
                return result, inputs, merges
            merges += 1
            metrics.DOUBLE_TEXT_MERGES.inc()
            metrics.DISCARDED_MODEL_CALLS.inc(result.model_calls)
            if result.usage is not None:
                metrics.DISCARDED_TOKENS.inc(result.usage.prompt_tokens + result.usage.completion_tokens)
            log.info("double text: answer discarded, turn runs again",
                     extra={"conversation_id": self.r.cid, "message_id": inputs[0].id, "inputs": len(grown)})
            inputs = grown
            self.journal.record_burst([p.id for p in inputs])

    def _once(self, inputs: tuple[Pending, ...], state: State) -> TurnResult:
        d, head, last = self.d, inputs[0], inputs[-1]
        new, attachments = self._messages(inputs)
        with turn_context(self.r.cid, head.id):
            return d.chat.run_turn(state, system=last.env.system or head.env.system or d.config.system_prompt,
                                   messages=new[:-1], user=new[-1], journal=self.journal, attachments=attachments)

    def _messages(self, inputs: Sequence[Pending]) -> tuple[list[Message], dict[str, Attachment]]:
        """The turn's new messages in mailbox order (each chat message a user message, a photo with its picture
        when the model sees it; each event an event, or the player's words when the player sent it), and the
        pictures by media id."""
        out: list[Message] = []
        attachments: dict[str, Attachment] = {}
        for p in inputs:
            if p.env.kind == "event":
                out.append(msgs.event(p.env.text or "", pinned=p.env.pinned, from_player=bool(p.env.from_player)))
                continue
            prepared = self._prepare(p)
            out.append(prepared.message if prepared.message is not None else msgs.user(UNLOADED_PHOTO))
            if prepared.attachment is not None:
                attachments[prepared.attachment[0]] = prepared.attachment[1]
        return out, attachments

    def _prepare(self, p: Pending) -> Prepared:
        if p.id not in self._prepared:
            self._prepared[p.id] = self.d.media.prepare(p.env, self._photos)
        return self._prepared[p.id]
