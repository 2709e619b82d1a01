"""The lease heartbeat: keeps the leases of the turns and deliveries in progress alive.

A lease must be short, so that a dead worker's conversations are taken over soon, and yet outlast a turn that
waits on a slow model. So the lease stays short and one thread per process renews every lease in use, about
three times per lease period. A worker that dies takes its heartbeat with it; a worker that stalls (a frozen
VM, a SIGSTOP, a blocked gevent hub) stalls its heartbeat too, so its lease runs out, another worker takes a
newer token and the fence refuses the stalled worker's commit. A turn stuck for longer than ``max_hold``
without committing stops being renewed: it loses the conversation the same way.

The thread is an ordinary :class:`threading.Thread`; under the gevent pool Celery has patched ``threading``, so
it is a greenlet. Under prefork each child starts its own on first use (threads do not survive a fork).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import TracebackType

from worker import metrics
from worker.errors import StoreError

log = logging.getLogger("parley.heartbeat")

AbstractLock = AbstractContextManager[bool]  # threading.Lock and RLock

Renew = Callable[[], bool]
"""Renews one lease; ``False`` when another worker took a newer token (then renewing stops)."""


class Beat:
    """One lease kept alive by a :class:`Heartbeat`.

    A renewal landing after the lease was given up would take it back for a whole lease period, hiding the
    conversation from the next drain and from the sweeper. So every store call that may give the lease up runs
    inside :meth:`committing`, which no renewal overlaps, and :meth:`end` is called once it has.

    The beat is its own guard for :meth:`committing` (``with beat.committing():`` enters the beat): a guard object
    holding the beat, held by the beat, made each beat a reference cycle, and with its lock, its renew closures and
    what they hold, every turn left about 20 objects (two beats) to the cyclic garbage collector instead of freeing
    them at once.
    """

    def __init__(self, renew: Renew, what: str, now: float) -> None:
        self.renew = renew
        self.what = what
        self.renewed = now
        self.since = now  # the start, or the last commit: the stuck-turn clock
        self.active = True
        self._lock = threading.RLock()

    def committing(self) -> AbstractContextManager[None]:
        """Run a store call that commits (and may give the lease up) with no renewal in parallel. The stuck-turn
        clock restarts when the call returns (not when it raises). Re-entrant: a commit inside another's guard."""
        return self

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if exc_type is None:
                self.since = time.monotonic()
        finally:
            self._lock.release()

    def end(self) -> None:
        """Renew no more (waits for a renewal in progress)."""
        with self._lock:
            self.active = False

    def beat(self, now: float, max_hold: float) -> bool:
        """Renew the lease once; returns whether to keep renewing it."""
        with self._lock:
            if not self.active:
                return False
            if now - self.since > max_hold:
                log.warning("no commit for too long; letting the lease run out", extra={"what": self.what})
                self.active = False
                return False
            try:
                self.active = self.renew()
            except StoreError as exc:  # Redis trouble: try again at the next tick, the lease has slack for it
                log.warning("lease renewal failed", extra={"what": self.what, "error": f"{type(exc).__name__}: {exc}"})
                return True
            self.renewed = now
            return self.active


class _Holding:
    """:meth:`Heartbeat.holding` (a class, not a generator: a generator-based context manager costs several times
    the lock it takes, and a turn holds two leases)."""

    __slots__ = ("beat", "heartbeat", "release", "renew", "what")

    def __init__(self, heartbeat: Heartbeat, renew: Renew, release: Callable[[], None], what: str) -> None:
        self.heartbeat, self.renew, self.release, self.what = heartbeat, renew, release, what

    def __enter__(self) -> Beat:
        self.beat = self.heartbeat.start(self.renew, self.what)
        return self.beat

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.heartbeat.stop(self.beat)  # first, so no renewal can land after the release below
        if exc_type is not None:
            self.release()


class Heartbeat:
    """Renews the leases registered with :meth:`start` every ``interval`` seconds, from one thread per process.

    The thread starts with the first lease and stops after ``idle_exit`` seconds without any. With
    ``autostart`` off no thread runs: whoever holds the heartbeat calls :meth:`tick` (tests drive time so).
    """

    def __init__(self, interval: float, max_hold: float, *, idle_exit: float = 60.0, autostart: bool = True) -> None:
        self.interval = interval
        self.max_hold = max_hold
        self.idle_exit = idle_exit
        self.autostart = autostart
        self._beats: set[Beat] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self, renew: Renew, what: str) -> Beat:
        """Keep a lease alive until :meth:`stop` (or until ``renew`` says another worker took it)."""
        beat = Beat(renew, what, time.monotonic())
        with self._lock:
            self._beats.add(beat)
            if self.autostart and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._run, name="parley-heartbeat", daemon=True)
                self._thread.start()
        return beat

    def holding(self, renew: Renew, release: Callable[[], None], what: str) -> AbstractContextManager[Beat]:
        """Keep a lease alive while the body runs. On an error the beat stops first and the lease is given up
        after it (``release``), so no renewal can land after the release and take the lease back; the error goes
        on. The body ends the beat itself when its last commit gave the lease up (see :class:`Beat`)."""
        return _Holding(self, renew, release, what)

    def stop(self, beat: Beat) -> None:
        """Stop renewing ``beat``'s lease (it may then be given up safely)."""
        beat.end()
        with self._lock:
            self._beats.discard(beat)

    def tick(self) -> int:
        """Renew every lease last renewed ``interval`` ago or more; returns how many were renewed."""
        now = time.monotonic()
        with self._lock:
            due = [b for b in self._beats if now - b.renewed >= self.interval]
        renewed = 0
        for beat in due:
            if beat.beat(now, self.max_hold):
                renewed += 1
            else:
                with self._lock:
                    self._beats.discard(beat)
        return renewed

    def _run(self) -> None:
        # Ticks at a third of the interval: a lease is renewed at most 4/3 intervals after the last time.
        tick_until_idle(self.interval / 3, self.tick, lambda: bool(self._beats), self._lock, self.idle_exit,
                        self._stopped, where="heartbeat", log=log, level=logging.ERROR)

    def _stopped(self) -> None:
        self._thread = None


def tick_until_idle(period: float, tick: Callable[[], object], busy: Callable[[], bool], lock: AbstractLock,
                    idle_exit: float, stopped: Callable[[], None], *, where: str, log: logging.Logger,
                    level: int) -> None:
    """The body of a process-wide ticker thread (the heartbeat's, the typing indicator's refresher): ``tick`` every
    ``period`` seconds, outliving a bug in one tick (logged at ``level`` and counted), until nothing has been
    ``busy`` for ``idle_exit`` seconds; then ``stopped`` runs under ``lock`` (so a starter that holds the lock sees
    the thread gone and starts another) and the thread ends."""
    idle_since = time.monotonic()
    while True:
        time.sleep(period)
        try:
            tick()
        except Exception:
            metrics.UNEXPECTED_ERRORS.labels(where).inc()
            log.log(level, "%s tick failed", where, exc_info=True)
        with lock:
            if busy():
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > idle_exit:
                stopped()
                return
