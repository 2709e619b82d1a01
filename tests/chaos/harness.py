"""A Jepsen-style checker for Parley: load many conversations through real workers while faults are
injected, then check every conversation's history and deliveries.

Per conversation, inputs are accepted in a known order. Afterwards three records of the run are compared with that
order: the trace (what the workers applied), the committed state (what the conversation holds), and the WhatsApp
stand-in (what was sent, each send naming its reply part by its callback data):

- lost: accepted but not applied;                                   must be 0
- duplicated: applied more than once;                               must be 0
- reordered: applied out of acceptance order;                       must be 0
- stranded: still waiting in a mailbox or outbox at the end;        must be 0
- dead letters: each scenario states the ones it expects (``Load.expect_dead``; by default none): any other one,
  input or reply, fails the run with its reason printed. An expected dead input counts as handled, not applied.
- state: the committed state's user messages and events, in history order, must be the accepted inputs that were
  not dead-lettered, each once, in acceptance order. Compaction (on in every scenario: 400 tokens, the last two
  exchanges kept) replaces old messages by a summary, so in a compacted state the survivors must be in order,
  without duplicates, and, from the first survivor of the kept tail on, every later input must be there (the kept
  tail is contiguous; only pinned messages and the conversation's first user message, which compaction always
  keeps, survive from before it);
- archive: every applied input that is no longer in the committed history (compaction dropped it, the size bound)
  is in the conversation's archive, and none is in both or archived twice (``archive_lost``, ``archive_duplicated``:
  must be 0): the archive is written by the commit that takes a message out, so a worker's SIGKILL between a
  compaction and its splice, or a retried commit, loses none and writes none twice;
- reply lost / reordered: an applied turn's reply missing / out of order;    must be 0
- reply part duplicated: a part (conversation, reply, part index) may reach WhatsApp twice only if that very part
  was resent by a worker that found it in the send window (the workers' ``RESEND_LOG`` line names the part), once
  per such resend.

Timers (``Load.timer_conversations`` > 0): that many more conversations get all their inputs with ``at=`` at the
start, due one after another over ``Load.timer_window`` seconds while the faults go on; their acceptance order is
their due order (nothing else is sent to them), so the same checks say none was lost, fired twice or reordered.
Handoff (``Load.handoff_every`` > 0): every such conversation is paused for the middle half of the run, a person's
message follows each of its inputs meanwhile, then it is resumed. A paused turn's trace entry says ``paused`` (and
lists a burst's inputs): those inputs are applied with no reply, and the operator's messages are replies like the
model's (their text itself, in acceptance order). The never-silent rule allows this only to inputs accepted before
the resume of a conversation that was paused (``Observed.may_withhold``); any other input withheld is ``silenced``.

Bursts (``Load.burst_max`` > 1 sends players' bursts): a turn that took in several inputs is one trace entry whose
``burst`` lists them, head first; each counts as applied by that turn, and the turn's one reply answers its last
message, so the messages before it in the burst expect no reply of their own.

The checking is :func:`check_conversation`, a function of what the run left behind (:class:`Observed`), so that
``test_checker.py`` can show on synthetic records that each check fails when it should.
"""

from __future__ import annotations

import json
import random
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import msgpack

from tests.e2e.conftest import Cluster
from tests.support.fake_whatsapp import SentPart
from tests.support.store_kit import raw as raw_client
from tests.support.workers import WorkerProcess, wait_until
from worker import inspect_state
from worker.conversation.messages import OPERATOR_FIRST
from worker.conversation.recall.codec import decode_archive
from worker.envelopes.inputs import DeadLetter, decode_dead_letter, decode_reply
from worker.service.deliver.inflight import RESEND_LOG

WINDOW_LOG = RESEND_LOG
PartKey = tuple[str, str, int]  # (conversation, reply id, part index)


@dataclass
class Outcome:
    conversations: int = 0
    inputs: int = 0
    applied: int = 0
    dead: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    stranded: int = 0
    replies: int = 0
    replies_lost: int = 0
    replies_duplicated: int = 0
    replies_reordered: int = 0
    window_hits: int = 0
    burst_turns: int = 0  # committed turns that took in more than one input
    burst_inputs: int = 0  # the inputs those turns took in
    parts_duplicated: int = 0  # extra sends of one reply part
    parts_unexplained: int = 0  # extra sends of a part beyond the resends the workers logged for that very part
    parts_unnamed: int = 0  # sends without callback data naming their part
    state_lost: int = 0
    state_duplicated: int = 0
    state_reordered: int = 0
    state_unknown: int = 0  # user messages or events in a state that no applied input explains
    archive_lost: int = 0  # applied inputs neither in the committed history nor in the archive
    archive_duplicated: int = 0  # applied inputs archived twice, or both archived and still in the history
    compacted: int = 0  # conversations whose state had dropped old messages for a summary
    withheld: int = 0  # inputs a paused turn applied with no reply
    silenced: int = 0  # inputs withheld where no pause allowed it (never-silent broken)
    faults: int = 0
    fault_kinds: dict[str, int] = field(default_factory=dict)  # faults shown to have landed, by kind
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    dead_reasons: dict[str, int] = field(default_factory=dict)
    unexpected_dead: list[str] = field(default_factory=list)  # "cid what id: reason (detail)"
    problems: list[str] = field(default_factory=list)  # what the state and part checks found, one line each

    def landed(self, kind: str) -> None:
        """Count a fault of ``kind`` shown to have taken effect."""
        self.faults += 1
        self.fault_kinds[kind] = self.fault_kinds.get(kind, 0) + 1

    def line(self) -> str:
        return (f"inputs={self.inputs} applied={self.applied} dead={self.dead} faults={self.faults} "
                f"lost={self.lost} duplicated={self.duplicated} reordered={self.reordered} stranded={self.stranded} "
                f"replies={self.replies} replies_lost={self.replies_lost} replies_reordered={self.replies_reordered} "
                f"replies_duplicated={self.replies_duplicated} window_hits={self.window_hits} "
                f"burst_turns={self.burst_turns} burst_inputs={self.burst_inputs} "
                f"parts_duplicated={self.parts_duplicated} parts_unexplained={self.parts_unexplained} "
                f"state_lost={self.state_lost} state_duplicated={self.state_duplicated} "
                f"state_reordered={self.state_reordered} state_unknown={self.state_unknown} "
                f"archive_lost={self.archive_lost} archive_duplicated={self.archive_duplicated} "
                f"compacted={self.compacted} withheld={self.withheld} silenced={self.silenced} fault_kinds={self.fault_kinds} "
                f"seconds={self.seconds:.1f} dead_reasons={self.dead_reasons} "
                f"restarts={sum(1 for n in self.notes if n.startswith('restarted'))}")

    def assert_safe(self) -> None:
        assert not any(n.startswith("stranded") for n in self.notes), self.notes
        assert (self.lost, self.duplicated, self.reordered, self.stranded) == (0, 0, 0, 0), self.line()
        assert (self.replies_lost, self.replies_reordered) == (0, 0), self.line()
        assert not self.unexpected_dead, f"unexpected dead letters: {self.unexpected_dead[:20]} {self.line()}"
        assert (self.state_lost, self.state_duplicated, self.state_reordered, self.state_unknown) == (0, 0, 0, 0), \
            f"{self.problems[:20]} {self.line()}"
        assert (self.parts_unexplained, self.parts_unnamed) == (0, 0), f"{self.problems[:20]} {self.line()}"
        assert (self.archive_lost, self.archive_duplicated) == (0, 0), f"{self.problems[:20]} {self.line()}"
        assert self.replies_duplicated <= self.window_hits, self.line()
        assert self.silenced == 0, f"{self.problems[:20]} {self.line()}"


def no_dead_letters(cid: str, dead: DeadLetter) -> bool:
    """The default expectation: no dead letter at all."""
    return False


@dataclass
class Observed:
    """What a run left behind for one conversation, as the checker reads it."""

    accepted: list[tuple[str, str, str]]  # (input id, kind, text), in acceptance order
    trace: list[dict[str, Any]]  # the trace entries, oldest first
    state: dict[str, Any]  # worker.inspect_state's view of the committed state
    sent: list[SentPart]  # what reached WhatsApp for this recipient, in order
    dead: list[DeadLetter]  # the conversation's dead letters
    stuck: int = 0  # inputs and replies still waiting
    may_withhold: int = 0  # the inputs accepted before this many may be withheld (paused); 0: never paused
    archive: list[tuple[str, str]] | None = None  # the archive's (id, text), oldest first; None: not checked


@dataclass
class Load:
    conversations: int = 20
    inputs_per: int = 10
    event_every: int = 4
    workers: int = 3
    concurrency: int = 16
    pace: float = 0.002
    settle_timeout: float = 120.0
    burst_max: int = 1  # each round, a player sends 1..burst_max messages, burst_gap apart (an event round: after it)
    burst_gap: float = 0.05
    ready_first: bool = False  # start producing once every worker is up (else the first inputs queue a few seconds)
    worker_env: Callable[[int], dict[str, str]] | None = None  # environment of worker i on top of the cluster's
    expect_dead: Callable[[str, DeadLetter], bool] = no_dead_letters  # (cid, dead letter) -> expected?
    timer_conversations: int = 0  # conversations whose inputs are all sent with at= (see the module docstring)
    timer_window: float = 6.0  # seconds over which their inputs come due
    handoff_every: int = 0  # every n-th conversation is paused for the middle half of the run (see the module)


def run_scenario(cluster: Cluster, load: Load,
                 chaos: Callable[[Cluster, threading.Event, Outcome], None] | None = None) -> Outcome:
    out = Outcome(conversations=load.conversations + load.timer_conversations)
    # A mixed fleet, so every scenario runs through both supported pools: even workers threads, odd gevent.
    for i in range(load.workers):
        cluster.start_worker(f"chaos{i}", concurrency=load.concurrency, pool=("threads", "gevent")[i % 2],
                             env=load.worker_env(i) if load.worker_env else None)
    client = cluster.client()
    cids = [f"4477{i:08d}" for i in range(load.conversations)]
    accepted: dict[str, list[tuple[str, str, str]]] = {c: [] for c in cids}  # (id, kind, text)
    timer_cids = schedule_timers(client, load, accepted)
    may_withhold: dict[str, int] = {}
    handed = set(cids[::load.handoff_every]) if load.handoff_every else set()
    handing = cluster.store()
    pause_at, resume_at = load.inputs_per // 4, load.inputs_per * 3 // 4
    stop = threading.Event()
    chaos_thread = None
    if chaos is not None:
        chaos_thread = threading.Thread(target=chaos, args=(cluster, stop, out), daemon=True)
        chaos_thread.start()
    # A supervisor, as in production (systemd, Kubernetes): a worker process that exits is started again.
    supervising = threading.Event()

    def supervise() -> None:
        while not supervising.wait(0.5):
            for w in cluster.workers:
                if w.proc is not None and w.proc.poll() is not None:
                    out.notes.append(f"restarted {w.name} (exit {w.proc.returncode})")
                    w.start()

    threading.Thread(target=supervise, daemon=True).start()
    if load.ready_first:
        wait_until(lambda: all(" ready." in w.log() for w in cluster.workers), 30, interval=0.1)
    started = time.monotonic()
    for n in range(load.inputs_per):
        order = cids[:]
        random.shuffle(order)
        for cid in order:
            mid = f"{cid}-{n}"
            if load.event_every and n % load.event_every == load.event_every - 1:
                batch = [(mid, "event", f"{cid} event {n}")]
            else:
                batch = [(mid, "message", f"{cid} q{n}")]
            # A player's burst: more chat messages right behind (none unless the load sends bursts).
            batch += [(f"{mid}.{j}", "message", f"{cid} q{n}.{j}") for j in range(1, random.randint(1, load.burst_max))]
            if cid in handed and n in (pause_at, resume_at):  # at once, not in the conversation's order
                if n == resume_at:  # the person hands back once the inputs of the pause were handled (withheld)
                    wait_until(partial(_drained, handing, cid), 20, interval=0.05)
                _retrying(partial(client.pause if n == pause_at else client.resume, cid), out)
                may_withhold[cid] = len(accepted[cid]) if n == resume_at else load.inputs_per * 10
            if cid in handed and pause_at <= n < resume_at:
                batch.append((f"{mid}.op", "operator", f"{cid} operator {n}"))
            for i, (mid, kind, text) in enumerate(batch):
                if i:
                    time.sleep(load.burst_gap)
                for attempt in range(50):
                    try:
                        if kind == "event":
                            client.send_event(cid, text, message_id=mid)
                        elif kind == "operator":
                            client.send_operator_message(cid, text, message_id=mid)
                        else:
                            client.send_message(cid, text, message_id=mid)
                        accepted[cid].append((mid, kind, text))
                        break
                    except Exception as exc:  # Redis restarting: the producer retries with the same id
                        if attempt == 49:
                            raise
                        out.notes.append(f"producer retry: {type(exc).__name__}")
                        time.sleep(0.2)
            time.sleep(load.pace)
    out.inputs = sum(len(v) for v in accepted.values())
    store = cluster.store()

    def settled() -> bool:
        try:
            return (all(store.inbox_depth(c) == 0 and store.outbox_depth(c) == 0 for c in accepted)
                    and not any(store.scheduled(c) for c in timer_cids))
        except Exception:
            return False

    # Let the chaos run a little longer than the producer, then stop it and let the system settle.
    time.sleep(1.0)
    stop.set()
    if chaos_thread is not None:
        chaos_thread.join(60)
    for w in cluster.workers:
        if not w.alive():
            out.notes.append(f"restarted {w.name} after the chaos")
            w.start()  # the same process settings (its network namespace too), a new process
    wait_until(settled, load.settle_timeout, interval=0.25)
    supervising.set()
    out.seconds = time.monotonic() - started
    time.sleep(0.5)

    windows = window_hits(w.log() for w in cluster.workers)
    out.window_hits = sum(windows.values())
    for cid in accepted:  # the conversations of the producer's loop, then those of the timers
        stuck = store.inbox_depth(cid) + store.outbox_depth(cid) + len(store.scheduled(cid))
        if stuck:
            k = store.keys(cid)
            r = raw_client(store)
            out.notes.append(f"stranded {cid}: pending={r.zscore(store.global_keys.pending, cid)} lease={r.pttl(k.lease)} "
                             f"dlease={r.pttl(k.dlease)} hold={r.pttl(k.hold)} sent={r.hgetall(k.sent)} "
                             f"inbox={store.inbox_depth(cid)} outbox={store.outbox_depth(cid)}")
        observed = Observed(accepted=accepted[cid],
                            trace=[msgpack.unpackb(t, raw=False) for t in store.trace(cid, 100_000)],
                            state=inspect_state(store.read_state(cid).blob),
                            sent=cluster.whatsapp.parts_for(cid),
                            dead=[decode_dead_letter(d) for d in store.dead_letters(cid)], stuck=stuck,
                            may_withhold=may_withhold.get(cid, 0), archive=archive_of(store, cid))
        check_conversation(cid, observed, windows, load.expect_dead, out)
    return out


def schedule_timers(client: Any, load: Load, accepted: dict[str, list[tuple[str, str, str]]]) -> list[str]:
    """Send every input of ``load.timer_conversations`` conversations but their first with ``at=``, due in order over
    ``load.timer_window`` seconds from a second from now; adds them to ``accepted`` in due order (their order)."""
    from datetime import UTC, datetime, timedelta

    start = datetime.now(UTC) + timedelta(seconds=1)
    cids = [f"4478{i:08d}" for i in range(load.timer_conversations)]
    for cid in cids:
        # The player wrote first (a held message does not open WhatsApp's window when it fires).
        client.send_message(cid, f"{cid} hello", message_id=f"{cid}-hello")
        accepted[cid] = [(f"{cid}-hello", "message", f"{cid} hello")]
        for n in range(load.inputs_per):
            mid, kind = f"{cid}-t{n}", "event" if load.event_every and n % load.event_every == 1 else "message"
            text = f"{cid} timer {n}"
            at = start + timedelta(seconds=load.timer_window * (n + random.random() * 0.9) / load.inputs_per)
            if kind == "event":
                client.send_event(cid, text, message_id=mid, at=at)
            else:
                client.send_message(cid, text, message_id=mid, at=at)
            accepted[cid].append((mid, kind, text))
    return cids


def _drained(store: Any, cid: str) -> bool:
    try:
        return bool(store.inbox_depth(cid) == 0)
    except Exception:  # Redis restarting
        return False


def _retrying(call: Callable[[], object], out: Outcome) -> None:
    """``call`` (a pause or a resume), tried again while Redis restarts, as the producer's sends are."""
    for attempt in range(50):
        try:
            call()
            return
        except Exception as exc:
            if attempt == 49:
                raise
            out.notes.append(f"producer retry: {type(exc).__name__}")
            time.sleep(0.2)


_WINDOW_FIELDS = re.compile(re.escape(RESEND_LOG) + r"\W*(\{.*\})\s*$")


def window_hits(logs: Iterable[str]) -> Counter[PartKey]:
    """The parts the workers resent after finding them in the send window, each with how many times: read from
    the ``RESEND_LOG`` lines, whose fields (``conversation_id``, ``message_id`` (the reply), ``part``) name the
    part. A line that does not name its part is counted under ``("?", "?", -1)``, which no send matches."""
    hits: Counter[PartKey] = Counter()
    for text in logs:
        for line in text.splitlines():
            if RESEND_LOG not in line:
                continue
            m = _WINDOW_FIELDS.search(line)
            try:  # a JSON line (PARLEY_LOG_JSON) carries the fields at its top level; a text line after the words
                f = json.loads(line) if line.startswith("{") else json.loads(m.group(1)) if m else {}
                hits[(str(f["conversation_id"]), str(f["message_id"]), int(f["part"]))] += 1
            except (ValueError, KeyError, TypeError):
                hits[("?", "?", -1)] += 1
    return hits


def check_conversation(cid: str, seen: Observed, windows: Counter[PartKey],
                       expect_dead: Callable[[str, DeadLetter], bool], out: Outcome) -> None:
    """Check one conversation's records against its accepted inputs; add the findings to ``out``."""
    dead = _dead_letters(cid, seen, expect_dead, out)
    dead_inputs = {d.id for d in dead if d.what == "input"}
    answered_by_later = _check_trace(seen, dead_inputs, out)
    withheld = _withheld(cid, seen, out)
    out.stranded += seen.stuck
    _check_state(cid, seen, dead_inputs, out)
    if seen.archive is not None:
        _check_archive(cid, seen, dead_inputs, out)
    _check_replies(cid, seen, dead, dead_inputs | answered_by_later | withheld, windows, out)


def _withheld(cid: str, seen: Observed, out: Outcome) -> set[str]:
    """The inputs paused turns applied with no reply; each one the conversation's pause does not explain (accepted
    after its resume, or the conversation never paused) is counted as silenced."""
    ids = {mid for t in seen.trace if t.get("paused") for mid in (t.get("burst") or [t["id"]])}
    allowed = {mid for mid, _, _ in seen.accepted[:seen.may_withhold]}
    out.withheld += len(ids)
    for mid in sorted(ids - allowed):
        out.silenced += 1
        out.problems.append(f"{cid}: input {mid} got no reply (withheld as paused) outside a pause")
    return ids


def _dead_letters(cid: str, seen: Observed, expect_dead: Callable[[str, DeadLetter], bool],
                  out: Outcome) -> list[DeadLetter]:
    """The conversation's dead letters (those of the dead list, and any input the trace shows dead-lettered that
    the list does not hold), each unexpected one noted with its reason."""
    dead = list(seen.dead)
    listed = {d.id for d in dead if d.what == "input"}
    dead += [DeadLetter(what="input", id=str(t["id"]), reason=str(t["dead"]), detail=str(t.get("detail", "")))
             for t in seen.trace if "dead" in t and t["id"] not in listed]
    for d in dead:
        out.dead_reasons[d.reason] = out.dead_reasons.get(d.reason, 0) + 1
        if not expect_dead(cid, d):
            out.unexpected_dead.append(f"{cid} {d.what} {d.id}: {d.reason} ({d.detail[:160]})")
    out.dead += len(dead)
    return dead


def _check_trace(seen: Observed, dead_inputs: set[str], out: Outcome) -> set[str]:
    """Lost, duplicated, reordered inputs by the trace; returns the burst inputs answered by a later one."""
    turns = [t for t in seen.trace if not str(t["id"]).startswith("compact-") and "dead" not in t
             and "splice" not in t]
    ids = [mid for t in turns for mid in (t.get("burst") or [t["id"]])]  # a burst turn applied every input
    answered_by_later = {mid for t in turns for mid in (t.get("burst") or [])[:-1]}  # one reply: to the last
    out.burst_turns += sum(1 for t in turns if t.get("burst"))
    out.burst_inputs += sum(len(t.get("burst") or []) for t in turns)
    want = [mid for mid, _, _ in seen.accepted if mid not in dead_inputs]
    applied = Counter(ids)
    out.duplicated += sum(n - 1 for n in applied.values() if n > 1)
    out.duplicated += sum(1 for mid in dead_inputs if mid in applied)  # applied and dead-lettered
    out.lost += sum(1 for mid in want if mid not in applied)
    if [m for m in dict.fromkeys(ids) if m in want] != [m for m in want if m in applied]:
        out.reordered += 1
    out.applied += len(applied)
    return answered_by_later


def _check_state(cid: str, seen: Observed, dead_inputs: set[str], out: Outcome) -> None:
    """The committed state against the accepted inputs (see the module docstring for compaction)."""
    view = seen.state
    if not view.get("ok"):
        out.state_lost += 1
        out.problems.append(f"{cid}: state unreadable: {view}")
        return
    by_text = {text: mid for mid, _, text in seen.accepted}
    want = [mid for mid, _, _ in seen.accepted if mid not in dead_inputs]
    # The state's pinned list (what survives every compaction) and its history, merged in conversation order.
    msgs = sorted([*({**m, "pinned": True} for m in view.get("pinned", [])), *view.get("history", [])],
                  key=lambda m: int(m["seq"]))
    held = [(by_text.get(m.get("content", "")), bool(m.get("pinned")), m.get("content", ""))
            for m in msgs if (m["role"] in ("user", "event") or m.get("by") == "operator")  # a person's words too
            and m.get("content") != OPERATOR_FIRST]  # the game's note before a person's words that open a history
    for mid, _, text in held:
        if mid is None or mid in dead_inputs:
            out.state_unknown += 1
            out.problems.append(f"{cid}: the state holds {text!r}, which is no applied input")
    got = [mid for mid, _, _ in held if mid is not None and mid not in dead_inputs]
    counts = Counter(got)
    for mid, n in counts.items():
        if n > 1:
            out.state_duplicated += n - 1
            out.problems.append(f"{cid}: the state holds input {mid} {n} times")
    if list(dict.fromkeys(got)) != [m for m in want if m in counts]:
        out.state_reordered += 1
        out.problems.append(f"{cid}: the state holds inputs in the order {got}, accepted {want}")
    compacted = bool(view.get("compactions") or view.get("summary"))
    out.compacted += compacted
    tail = want
    if compacted:  # old messages gave way to a summary: from the first survivor of the kept tail on, none missing
        # Compaction always keeps the conversation's first user message and pinned ones: they do not start the tail.
        first_user = next((mid for mid, kind, _ in seen.accepted if kind == "message" and mid in want), None)
        first = next((mid for mid, pinned, _ in held if mid in want and not pinned and mid != first_user), None)
        tail = want[want.index(first):] if first is not None else want[-1:]
    missing = [mid for mid in tail if mid not in counts]
    out.state_lost += len(missing)
    if missing:
        out.problems.append(f"{cid}: the state lacks inputs {missing} (compacted={compacted})")


def archive_of(store: Any, cid: str) -> list[tuple[str, str]]:
    """The conversation's archive as its Redis list holds it: (id, text) of each message, oldest first."""
    batches = raw_client(store).lrange(store.keys(cid).recall, 0, -1)
    return [(m.id, m.text) for m in decode_archive(b"".join(batches))]


def _check_archive(cid: str, seen: Observed, dead_inputs: set[str], out: Outcome) -> None:
    """Every applied input is in the committed history or in the archive, exactly once over both (a pinned item's
    copy in the state's pinned list does not count: it left the history, so it is archived)."""
    assert seen.archive is not None
    by_text = {text: mid for mid, _, text in seen.accepted}
    history = [by_text.get(m.get("content", "")) for m in seen.state.get("history", [])]
    archived = [by_text.get(text) for _, text in seen.archive]
    ids = Counter(ident for ident, _ in seen.archive)
    twice = [ident for ident, n in ids.items() if n > 1]
    if twice:
        out.archive_duplicated += len(twice)
        out.problems.append(f"{cid}: the archive holds ids {twice[:5]} more than once")
    counts = Counter(mid for mid in history + archived if mid is not None)
    for mid, _, _ in seen.accepted:
        if mid in dead_inputs:
            continue
        if counts[mid] == 0:
            out.archive_lost += 1
            out.problems.append(f"{cid}: input {mid} is neither in the history nor in the archive")
        elif counts[mid] > 1:
            out.archive_duplicated += counts[mid] - 1
            out.problems.append(f"{cid}: input {mid} is {counts[mid]} times in the history and the archive")


def _check_replies(cid: str, seen: Observed, dead: list[DeadLetter], unanswered: set[str],
                   windows: Counter[PartKey], out: Outcome) -> None:
    """Every applied message's reply sent, in order; a part sent twice only as often as it was resent."""
    dead_replies = {p for d in dead if d.what == "reply" and d.payload for p in decode_reply(d.payload).parts}
    expected = [f"ack:{text}" if kind == "message" else text for mid, kind, text in seen.accepted
                if kind in ("message", "operator") and mid not in unanswered]
    got = [s.text for s in seen.sent]
    out.replies += len(got)
    dedup = list(dict.fromkeys(got))
    out.replies_duplicated += len(got) - len(dedup)
    want_replies = [t for t in expected if t not in dead_replies]
    out.replies_lost += sum(1 for t in want_replies if t not in dedup)
    if [t for t in dedup if t in want_replies] != [t for t in want_replies if t in dedup]:
        out.replies_reordered += 1
    out.parts_unnamed += sum(1 for s in seen.sent if s.reply_id is None or s.part is None)
    out.parts_duplicated += len(seen.sent) - len({(s.reply_id, s.part) for s in seen.sent})
    for problem, extra in part_duplicates_beyond_resends(cid, seen.sent, windows):
        out.parts_unexplained += extra
        out.problems.append(problem)


def part_duplicates_beyond_resends(cid: str, sent: list[SentPart], windows: Counter[PartKey]) -> list[tuple[str, int]]:
    """Each reply part of ``cid`` that reached WhatsApp more often than once plus the times the workers logged
    resending that very part, and each send that names no part: (what is wrong, how many sends too many)."""
    out = []
    for (reply_id, part), n in Counter((s.reply_id, s.part) for s in sent).items():
        if reply_id is None or part is None:
            out.append((f"{cid}: {n} sends without callback data naming their part", 0))
        elif n - 1 > (explained := windows[(cid, reply_id, part)]):
            out.append((f"{cid}: part {part} of reply {reply_id} reached WhatsApp {n} times; the workers resent it "
                        f"{explained} times from the send window", n - 1 - explained))
    return out


def sigkill_at_random(c: Cluster, stop: threading.Event, out: Outcome) -> None:
    """The chaos of SIGKILLs: a random worker killed and started again every 0.3-0.8 s."""
    while not stop.wait(random.uniform(0.3, 0.8)):
        w = random.choice(c.workers)
        w.kill(signal.SIGKILL)
        out.faults += 1
        time.sleep(0.2)
        w.start()


def restart(w: WorkerProcess) -> WorkerProcess:
    return w.start()
