"""Presence: the player sees that someone is there while their burst waits and while the model thinks.

WhatsApp shows two blue ticks on a message marked read, and a typing indicator that lasts until the next reply or
25 seconds. :class:`Presence` marks a burst read with the indicator on (:meth:`Presence.acknowledge`) when the
drainer defers it, and keeps the indicator up around a turn's model call (:meth:`Presence.typing`).

Best effort, never in the way of a turn:

- Every post runs off the caller's thread (a greenlet under gevent), at most ``max_in_flight`` at once; beyond
  that a post is dropped and counted. Leaving :meth:`Presence.typing` only forgets the turn: it never waits for
  a post. A post still on its way when the reply is sent could land after it and show the indicator again
  for up to 25 s, so the sender of the reply may first wait (briefly) with :meth:`Presence.settle`.
- One post per call, on the newest message: WhatsApp marks the earlier messages of the chat read with it, and
  the Cloud API's throughput is better spent on replies.
- Only WhatsApp's own message ids (``wamid.``...) are marked: a game event or an id a producer made up has no
  message to mark. A channel without :class:`~worker.channels.channel.ReadReceipts` turns presence off.
- Memory is bounded: the acknowledged ids and the last indicator time of each conversation are small LRUs, per
  process. Losing them (a restart, an eviction) costs at most one repeated receipt.

Refreshes for the turns in progress come from one thread per process, started on first use and gone after a
minute without turns, like the lease heartbeat (:mod:`worker.service.heartbeat`). It is not the heartbeat's own
thread because that one renews leases one after the other: a slow receipt there would delay every renewal.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from worker import metrics
from worker.channels.channel import ReadReceipts
from worker.service.heartbeat import tick_until_idle

log = logging.getLogger("parley.presence")

WHATSAPP_ID_PREFIX = "wamid."
# WhatsApp drops the indicator after 25 s; refreshing at 20 s leaves room for a late tick and a slow request.
DEFAULT_REFRESH_SECONDS = 20.0
# How long a reply waits for a post under way (settle): the WhatsApp sender's receipt timeout.
SETTLE_SECONDS = 3.0

Spawn = Callable[[Callable[[], None]], None]
"""Runs a post in the background (tests pass one that runs it at once)."""


def is_whatsapp_id(message_id: str | None) -> bool:
    """Whether ``message_id`` is an inbound WhatsApp message id that the Cloud API can mark read."""
    return message_id is not None and message_id.startswith(WHATSAPP_ID_PREFIX)


def _spawn_thread(post: Callable[[], None]) -> None:
    # Under the gevent pool threading is patched: this is a greenlet.
    threading.Thread(target=post, name="parley-presence-post", daemon=True).start()


class _Lru:
    """A bounded map from a key to the time it was last set; the least recently set goes first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[str, float] = OrderedDict()

    def get(self, key: str) -> float | None:
        return self._items.get(key)

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def set(self, key: str, value: float) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)


class _Turn:
    """A turn inside :meth:`Presence.typing`: the indicator is refreshed on its message until it ends."""

    __slots__ = ("cid", "message_id")

    def __init__(self, cid: str, message_id: str) -> None:
        self.cid = cid
        self.message_id = message_id


class Presence:
    """Read receipts and the typing indicator for a channel that has them (see the module docstring)."""

    def __init__(self, channel: object, *, enabled: bool, refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
                 clock: Callable[[], float] = time.monotonic, max_remembered: int = 4096, max_in_flight: int = 64,
                 spawn: Spawn = _spawn_thread, autostart: bool = True, idle_exit: float = 60.0) -> None:
        self._receipts = channel if enabled and isinstance(channel, ReadReceipts) else None
        self.refresh_seconds = refresh_seconds
        self.clock = clock
        self.autostart = autostart
        self.idle_exit = idle_exit
        self._spawn = spawn
        self._acked = _Lru(max_remembered)  # message id -> when it was marked read
        self._shown = _Lru(max_remembered)  # conversation id -> when its indicator was last posted
        self._turns: set[_Turn] = set()
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._lock = threading.Lock()
        self._posted = threading.Condition(self._lock)  # notified when a post ends
        self._in_flight: dict[str, int] = {}  # conversation id -> posts under way
        self._thread: threading.Thread | None = None

    @classmethod
    def disabled(cls) -> Presence:
        """A presence that does nothing (no channel, no thread)."""
        return cls(None, enabled=False)

    @property
    def enabled(self) -> bool:
        return self._receipts is not None

    def acknowledge(self, cid: str, message_ids: Sequence[str]) -> None:
        """Mark ``cid``'s inbound messages read and show the indicator on the newest, unless each was already
        marked and the indicator was shown less than ``refresh_seconds`` ago (a deferred burst run again)."""
        if self._receipts is None:
            return
        ids = [m for m in message_ids if is_whatsapp_id(m)]
        if ids:
            self._show(self._receipts, cid, ids)

    @contextmanager
    def typing(self, cid: str, message_id: str | None) -> Iterator[None]:
        """Keep the indicator up on ``message_id`` while the block runs (around a turn's model call): shown at
        entry unless it was within ``refresh_seconds``, then refreshed every ``refresh_seconds`` until exit.
        Exit only forgets the turn."""
        receipts = self._receipts
        if receipts is None or message_id is None or not is_whatsapp_id(message_id):
            yield
            return
        turn = _Turn(cid, message_id)
        with self._lock:
            self._turns.add(turn)
            if self.autostart and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._run, name="parley-presence", daemon=True)
                self._thread.start()
        try:
            self._show(receipts, cid, [message_id])
            yield
        finally:
            with self._lock:
                self._turns.discard(turn)

    def tick(self) -> int:
        """Refresh the indicator of every turn in progress whose last one is ``refresh_seconds`` old; returns how
        many posts were started. The thread calls it; with ``autostart`` off, tests do."""
        receipts = self._receipts
        if receipts is None:
            return 0
        with self._lock:
            turns = list(self._turns)
        return sum(self._show(receipts, t.cid, [t.message_id], turn=t) for t in turns)

    def settle(self, cid: str, timeout: float = SETTLE_SECONDS) -> bool:
        """Wait until no post for ``cid`` is under way, for at most ``timeout`` seconds (a post gives up after
        about that long); returns whether none is. Call it before sending a reply: a typing indicator that
        lands after the reply would show again for up to 25 s."""
        if self._receipts is None:
            return True
        with self._posted:
            return self._posted.wait_for(lambda: cid not in self._in_flight, timeout)

    def _show(self, receipts: ReadReceipts, cid: str, ids: Sequence[str], *, turn: _Turn | None = None) -> bool:
        """Post a read mark with the indicator on the newest of ``ids`` when one of them is not marked yet (a
        reply since the last indicator may have dismissed it) or the last indicator is due for a refresh;
        returns whether a post was started. The post marks the earlier ones read on WhatsApp's side. A refresh
        for a ``turn`` that has ended meanwhile is not started."""
        message_id = ids[-1]
        with self._lock:
            if turn is not None and turn not in self._turns:
                return False
            now = self.clock()
            shown = self._shown.get(cid)
            fresh = any(m not in self._acked for m in ids)
            if not fresh and shown is not None and now - shown < self.refresh_seconds:
                return False
            if not self._slots.acquire(blocking=False):
                metrics.PRESENCE.labels("dropped").inc()
                return False
            self._shown.set(cid, now)
            for m in ids:
                self._acked.set(m, now)
            self._in_flight[cid] = self._in_flight.get(cid, 0) + 1

        def post() -> None:
            try:
                mark_for = getattr(receipts, "mark_read_for", None)  # several numbers: the player's number
                if mark_for is not None:
                    mark_for(cid, message_id, typing=True)
                else:
                    receipts.mark_read(message_id, typing=True)
            except Exception:  # a bug in a channel: never the turn's problem, but seen
                metrics.PRESENCE.labels("unexpected").inc()
                log.warning("read receipt failed unexpectedly", exc_info=True,
                            extra={"conversation_id": cid, "message_id": message_id})
            finally:
                self._done(cid)

        try:
            self._spawn(post)
        except Exception:  # no thread to be had (the process is at its limit): skip this one
            self._done(cid)
            metrics.PRESENCE.labels("dropped").inc()
            log.warning("could not start a read receipt", exc_info=True, extra={"conversation_id": cid})
            return False
        return True

    def _done(self, cid: str) -> None:
        with self._posted:
            left = self._in_flight.pop(cid, 1) - 1
            if left:
                self._in_flight[cid] = left
            self._posted.notify_all()
        self._slots.release()

    def _run(self) -> None:
        # A tenth of the period: a refresh is late by at most that, well inside WhatsApp's 25 s.
        tick_until_idle(self.refresh_seconds / 10, self.tick, lambda: bool(self._turns), self._lock, self.idle_exit,
                        self._stopped, where="presence", log=log, level=logging.WARNING)

    def _stopped(self) -> None:
        self._thread = None
