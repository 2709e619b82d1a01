"""The worker's turn journal: the core's :class:`~worker.conversation.turn_journal.TurnJournal` backed by the store.

One :class:`StoreJournal` per turn, bound to the conversation, the input and the lease token: every entry is
written by the store's fenced RECORD_STEP before the model sees it, so a worker that lost its lease stops
(:class:`~worker.errors.StaleLeaseError`) instead of acting on. The commit that applies the input deletes the
journal. An entry that does not decode is logged and treated as absent (from there the turn goes on live), so a
damaged journal costs a repeated call at worst, never a stuck input.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

from worker import metrics
from worker.conversation.messages import Message
from worker.conversation.model import ModelResponse
from worker.conversation.turn_journal import decode_result, decode_round, encode_result, encode_round
from worker.durable_record.entries import Step, Trail
from worker.errors import StateDecodeError
from worker.store.interfaces import DrainStore

log = logging.getLogger("parley.service")


class StoreJournal:
    """``input_id``'s journal in ``cid``, written under ``token``; read once, when the turn starts, unless the
    drain's begin or commit already said it is empty (most turns: one round trip fewer)."""

    def __init__(self, store: DrainStore, cid: str, input_id: str, token: int, *, empty: bool = False) -> None:
        """``empty``: the store said the journal holds nothing (a first run): no read needed."""
        self.store, self.cid, self.input_id, self.token = store, cid, input_id, token
        self._rounds: list[ModelResponse] | None = [] if empty else None
        self._results: dict[tuple[int, str], Message] = {}
        self._burst: tuple[str, ...] | None = None
        # What the turn did, for the durable record: every tool call with its result and duration, and the tokens
        # of every round (a crashed run's replayed rounds included: that run never committed, so never counted).
        self.trail = Trail()
        self._mark = time.perf_counter()

    def _load(self) -> list[ModelResponse]:
        if self._rounds is None:
            read = self.store.read_journal(self.cid, self.input_id)
            self._burst = read.burst
            rounds: list[ModelResponse] = []
            try:
                while len(rounds) in read.rounds:  # contiguous from step 0: a gap ends the replay
                    rounds.append(decode_round(read.rounds[len(rounds)]))
            except StateDecodeError as exc:
                self._damaged(f"round {len(rounds)}: {exc.detail}")
            for key, entry in read.results.items():
                try:
                    self._results[key] = decode_result(entry)
                except StateDecodeError as exc:
                    self._damaged(f"result {key}: {exc.detail}")
            self._rounds = rounds
            for response in rounds:
                self._trail_round(response, replayed=True)
            for (_, call_id), result in self._results.items():
                self._trail_result(call_id, result, None)
            if rounds or self._results:
                metrics.JOURNAL_REPLAYS.inc()
                log.info("turn resumed from its journal", extra={"conversation_id": self.cid,
                                                                 "message_id": self.input_id, "rounds": len(rounds),
                                                                 "results": len(self._results)})
        return self._rounds

    def _damaged(self, detail: str) -> None:
        log.warning("journal entry unusable; going on live from there",
                    extra={"conversation_id": self.cid, "message_id": self.input_id, "detail": detail})
        metrics.JOURNAL_UNRECORDED.labels("damaged").inc()

    def recorded_burst(self) -> tuple[str, ...] | None:
        """The inputs (ids, head first) an earlier run of this turn took in, when it recorded them."""
        self._load()
        return self._burst

    def has_entries(self) -> bool:
        """Whether an earlier run recorded model rounds or tool results (then it must be replayed as it was)."""
        return bool(self._load() or self._results)

    def record_burst(self, ids: Sequence[str]) -> None:
        """Fix the inputs this turn takes in before the model sees them, so a retry takes in the same."""
        if not self.store.record_burst(self.cid, self.token, self.input_id, ids):
            log.warning("turn journal full; burst not recorded", extra={"conversation_id": self.cid,
                                                                        "message_id": self.input_id})
            metrics.JOURNAL_UNRECORDED.labels("full").inc()
        self._load()
        self._burst = tuple(ids)

    def recorded_rounds(self) -> Sequence[ModelResponse]:
        return self._load()

    def recorded_results(self) -> Mapping[tuple[int, str], Message]:
        self._load()
        return self._results

    def record_round(self, step: int, response: ModelResponse) -> None:
        self._record(step, None, encode_round(response))
        self._trail_round(response, replayed=False)

    def record_result(self, step: int, result: Message) -> None:
        self._record(step, result.tool_call_id, encode_result(result))
        now = time.perf_counter()
        self._trail_result(result.tool_call_id, result, (now - self._mark) * 1000)
        self._mark = now

    def _trail_round(self, response: ModelResponse, *, replayed: bool) -> None:
        self.trail.usage.add(response.usage, response.model)
        for call in response.message.tool_calls:
            self.trail.steps.append(Step(call.id, call.name, call.arguments, replayed=replayed))
        self._mark = time.perf_counter()

    def _trail_result(self, call_id: str | None, result: Message, ms: float | None) -> None:
        for step in reversed(self.trail.steps):
            if step.call_id == call_id and step.result is None:
                step.result, step.ms = result.content, ms
                return

    def _record(self, step: int, call_id: str | None, entry: bytes) -> None:
        if not self.store.record_step(self.cid, self.token, self.input_id, step=step, call_id=call_id, entry=entry):
            # Bounded: past the cap this step is not kept, so a retry would run it again. Visible, not fatal.
            log.warning("turn journal full; step not recorded", extra={"conversation_id": self.cid,
                                                                       "message_id": self.input_id, "step": step})
            metrics.JOURNAL_UNRECORDED.labels("full").inc()
