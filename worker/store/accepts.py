"""The producers' side of the mailbox: accepting inputs, one at a time or a batch in one round trip, and the request
and answer of one accept for a caller that sends the ACCEPT script over its own connection (the event loop's accept,
:mod:`worker.store.async_mailbox`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from worker.errors import InboxFullError
from worker.store.answers import AcceptResult, WakePush
from worker.store.async_scripts import WireSettings
from worker.store.codes import AcceptCode
from worker.store.core import StoreCore
from worker.store.entry_codec import join_entry
from worker.store.redis_errors import store_errors
from worker.store.replication import Replication
from worker.store.script_args import AcceptArgs, accept_call
from worker.store.script_replies import AcceptReply


@dataclass(frozen=True)
class AcceptRequest:
    """One ACCEPT as it is sent: its KEYS and ARGV, and the mailbox's bound it was sent with (named in the refusal
    of a full mailbox)."""

    cid: str
    keys: list[str]
    args: AcceptArgs
    limit: int


class AcceptStore(StoreCore):
    """Inputs into their mailboxes, deduplicated by id, bounded, the sweeper told first."""

    @store_errors
    def accept(self, cid: str, envelope: bytes, input_id: str, *, max_inbox: int | None = None,
               inbound: bool = False, ends_burst: bool = False, wake: WakePush | None = None,
               reset: bool = False) -> AcceptResult:
        """Append an input to the mailbox unless its id was accepted before. ``inbound``: the input is a message the
        player sent; the time of its first acceptance is kept as the conversation's last inbound message (see
        :meth:`~worker.store.outbox.OutboxStore.last_inbound`). ``ends_burst``: a game event the model answers, a
        reset or a person's message; accepted, it ends the hold of a burst's quiet period in the same step
        (``ended_hold``: wake a worker).
        ``wake``: the broker is this Redis, and the script pushes this wake-up itself when the input needs one
        (``woken`` says it did; the caller publishes none then). Ignored on a Cluster (the broker's queue is in
        another slot): ``woken`` stays False and the caller wakes as before. ``reset``: the input is a reset sent at
        once; accepted (not a duplicate, not refused), it drops every timer the conversation holds in the same step.

        Raises :class:`~worker.errors.InboxFullError` when the mailbox holds ``max_inbox`` inputs.
        """
        request = self.accept_request(cid, envelope, input_id, max_inbox=max_inbox, inbound=inbound,
                                      ends_burst=ends_burst, wake=wake, reset=reset)  # the id checked first
        # The sweeper must know of any conversation that might have work, so the pending mark comes first: in
        # the same script on a standalone Redis (one round trip), before it on a Cluster (another slot). Its score
        # is when work appeared (see accept.lua): on a Cluster it is stamped after the script that found the mailbox
        # empty (a sweeper that removed the mark in between, having found the mailbox empty, is undone by it).
        now_ms = request.args.now_ms
        if self._cluster:
            self._client.zadd(self.global_keys.pending, {cid: now_ms}, nx=True)
        res = self.accept_answer(request, self._scripts.accept(keys=request.keys, args=request.args))
        if self._cluster and res.accepted and res.depth == 1:
            self._client.zadd(self.global_keys.pending, {cid: now_ms})
        return res

    @store_errors
    def accept_many(self, inputs: Sequence[tuple[str, bytes, str, bool]]) -> list[AcceptResult | InboxFullError]:
        """:meth:`accept` for each ``(cid, envelope, input_id, inbound)``, sent in one round trip (a pipeline, run in
        this order): an input of a full mailbox answers its :class:`~worker.errors.InboxFullError` in its place.
        A Cluster client accepts them one by one. Raises :class:`~worker.errors.StoreUnavailableError` for an
        outage (some may have gone in: sent again, they are duplicates)."""
        if self._cluster or not inputs:
            return [self._accept_or_full(*one) for one in inputs]
        pipe = self._client.pipeline(transaction=False)
        requests = [self.accept_request(cid, envelope, input_id, inbound=inbound)
                    for cid, envelope, input_id, inbound in inputs]
        for request in requests:
            self._scripts.accept_in(pipe=pipe, keys=request.keys, args=request.args)
        replies = self._scripts.replication.execute(pipe, what="accept")
        return [self._answer_or_full(request, reply) for request, reply in zip(requests, replies, strict=True)]

    @classmethod
    def _answer_or_full(cls, request: AcceptRequest, reply: Sequence[Any]) -> AcceptResult | InboxFullError:
        try:
            return cls.accept_answer(request, reply)
        except InboxFullError as exc:
            return exc

    def _accept_or_full(self, cid: str, envelope: bytes, input_id: str, inbound: bool) -> AcceptResult | InboxFullError:
        try:
            return self.accept(cid, envelope, input_id, inbound=inbound)
        except InboxFullError as exc:
            return exc

    def accept_request(self, cid: str, envelope: bytes, input_id: str, *, max_inbox: int | None = None,
                       inbound: bool = False, ends_burst: bool = False, wake: WakePush | None = None,
                       reset: bool = False) -> AcceptRequest:
        """ACCEPT's KEYS and ARGV for one input (the arguments as for :meth:`accept`; ``wake`` is dropped on a
        Cluster): what the blocking accept and the event loop's both send."""
        keys = self.keys(cid)
        limit = max_inbox or self.limits.max_inbox
        script_keys, args = accept_call(
            keys=keys, pending=None if self._cluster else self.global_keys.pending, ttl_keys=self._ttl_keys(keys),
            input_id=input_id, entry=join_entry(input_id, envelope), now_ms=self._now_ms(), max_inbox=limit,
            dedupe_max=self.limits.dedupe_max_ids, dedupe_ms=self.limits.dedupe_ms, ttl_ms=self.limits.idle_ttl_ms,
            inbound=inbound, ends_burst=ends_burst, wake=None if self._cluster else wake, reset=reset)
        return AcceptRequest(cid, script_keys, args, limit)

    @staticmethod
    def accept_answer(request: AcceptRequest, reply: AcceptReply | Sequence[Any]) -> AcceptResult:
        """ACCEPT's reply (parsed or as Redis sent it) as the producer sees it; a full mailbox raises
        :class:`~worker.errors.InboxFullError`."""
        res = reply if isinstance(reply, AcceptReply) else AcceptReply.parse(reply)
        if res.code == AcceptCode.FULL:
            raise InboxFullError(f"conversation {request.cid} has {res.depth} inputs waiting; "
                                 f"the limit is {request.limit}")
        return AcceptResult(accepted=res.code == AcceptCode.ACCEPTED, duplicate=res.code == AcceptCode.DUPLICATE,
                            depth=res.depth, ended_hold=res.ended_hold, woken=res.woken)

    def loop_wire(self) -> WireSettings | None:
        """Where an event loop's own connection sends ACCEPT: the client's server, database and credentials; ``None``
        when the client does not qualify (a Cluster, whose accept adds to the sweeper's set apart; Sentinel, TLS,
        fakeredis: see :meth:`WireSettings.of <worker.store.async_scripts.WireSettings.of>`)."""
        return None if self._cluster else WireSettings.of(self._client)

    @property
    def replication(self) -> Replication:
        """How writes wait for replicas: an accept sent over another connection waits the same way."""
        return self._scripts.replication

