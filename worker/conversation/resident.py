"""States a worker keeps decoded between turns, so a turn does not decode what did not change.

A :class:`Resident` is what :class:`~worker.conversation.chat.Chat` hands back with every state it writes: the
decoded state and the blob it is (and whether that blob only appended to the stored one: then the store writes
only the appended bytes, :meth:`Resident.append_of`). The worker keeps the latest one per conversation in a :class:`ResidentCache`
under a *tag* the store gives each stored state (it changes with every write of the blob), and asks the store for
the blob only when its tag is not the current one. :meth:`Chat.run_turn` and the other methods take a resident in
place of the blob. Outside this package a resident is as opaque as a blob: the worker only stores and returns it.

Why it is safe: states are immutable values; a resident is used only when the store says the stored blob is the
very one it was made with (same tag), and every writer of a blob gives it a new tag. A miss costs what a turn cost
before (a decode); nothing else changes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import NamedTuple

from worker.conversation.history import CleanPrefix
from worker.conversation.state import ConversationState, Memo
from worker.conversation.tokens import CountedPrefix


class Append(NamedTuple):
    """How a blob was made from the stored one: ``basis``, the stored blob's length it was made on; ``cut``, where
    its new bytes start; ``replaced``, the stored bytes from ``cut`` that they replace (none for a plain append; the
    loose frames a fold compressed)."""

    basis: int
    cut: int
    replaced: bytes


@dataclass(frozen=True, slots=True, eq=False)
class Resident:
    """A decoded state and the memo of its encoding. ``size`` is about what it takes in memory, in bytes (what the
    cache counts)."""

    state: ConversationState
    memo: Memo
    size: int
    clean: CleanPrefix | None = None  # how much of the history the last request found valid (no re-check)
    counted: CountedPrefix | None = None  # the history's last token count (the next turn counts only what it adds)

    @property
    def blob(self) -> bytes:
        """The blob this resident is, byte for byte."""
        return self.memo.stored

    def append_of(self, blob: bytes) -> Append | None:
        """When ``blob`` is this resident's and was made by appending to the stored blob (or folding its loose
        frames, format 5): what the store writes of it (see :class:`Append`). ``None``: ``blob`` is written whole."""
        memo = self.memo
        if not memo.written_from or blob is not memo.stored:
            return None
        return Append(basis=memo.basis, cut=memo.written_from, replaced=memo.replaced)


class ResidentCache:
    """The latest resident of each conversation, least recently used first out, within about ``max_bytes`` of
    memory. Thread-safe; ``max_bytes=0`` keeps nothing."""

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[str, Resident]] = OrderedDict()
        self._bytes = 0

    def entry(self, key: str) -> tuple[str, Resident] | None:
        """The tag and resident kept for ``key``, if any. The caller holds on to the resident while it asks the
        store whether that tag is still the stored state's (another thread may evict it meanwhile)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: str, tag: str, resident: Resident | None) -> None:
        """Keep ``resident`` as ``key``'s state tagged ``tag`` (``None`` forgets the key)."""
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1].size
            if resident is None or not tag or resident.size > self.max_bytes:
                return
            self._entries[key] = (tag, resident)
            self._bytes += resident.size
            while self._bytes > self.max_bytes:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped.size

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        return self._bytes
