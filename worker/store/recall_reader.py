"""Reading a conversation's archive from Redis: the search index segments of its ``recall_index`` list, searched
each and merged by score.

The archive's record is ``recall`` (codec batches, written by the commits that drop messages from the history);
each of those commits also appends one small index segment to ``recall_index``, and a merge off the turn replaces
many segments by one. The segments hold the messages' texts, times and speakers, so a search and the context around
its hits need nothing else. Decoding a segment costs far more than asking it, so a process keeps the decoded
segments of the conversations it served, by the list's length: a turn decodes only the segments appended since the
last, and a list that got shorter (merged) is read again whole.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from worker.conversation.recall.archive import Recalled, recall
from worker.conversation.recall.archived import ArchivedMessage
from worker.conversation.recall.index import SearchIndex, match_expression
from worker.conversation.tokens import TokenCounter
from worker.store.keys import ConversationKeys

#: Conversations whose decoded segments a process keeps (least recently searched out first).
DEFAULT_CACHED_CONVERSATIONS = 64


@dataclass(frozen=True)
class Segments:
    """The decoded segments of one conversation's index, oldest first, read as one index: positions run on from one
    segment to the next, so the context of a hit may come from its neighbour."""

    indexes: tuple[SearchIndex, ...]

    def _starts(self) -> list[int]:
        starts, at = [], 0
        for index in self.indexes:
            starts.append(at)
            at += len(index)
        return starts

    def rank(self, query: str, limit: int) -> list[int]:
        """The best ``limit`` hits of all segments by BM25 score (lower first), as positions in the whole."""
        expression = match_expression(query)
        if expression is None:
            return []
        hits: list[tuple[float, int]] = []
        for start, index in zip(self._starts(), self.indexes, strict=True):
            hits.extend((score, start + position) for position, score in index.scored_match(expression, limit))
        hits.sort()
        return [position for _, position in hits[:limit]]

    def messages(self, first: int, last: int) -> dict[int, ArchivedMessage]:
        found: dict[int, ArchivedMessage] = {}
        for start, index in zip(self._starts(), self.indexes, strict=True):
            end = start + len(index) - 1
            if end < first or start > last:
                continue
            for position, message in index.messages(max(first, start) - start, min(last, end) - start).items():
                found[start + position] = message
        return found


#: A segment of fewer messages than this is folded into one index with the small segments next to it when it is
#: decoded: each commit appends a segment of a few messages, and asking a hundred small indexes costs a hundred
#: queries on every search, where folding each costs its few messages' terms once.
FOLD_BELOW = 200


@dataclass
class _Entry:
    """One conversation's decoded segments (the last perhaps a fold of small ones), how many of the list's segments
    they stand for, and the lock of a fold in progress."""

    indexes: list[SearchIndex]
    read: int
    last_folded: bool
    lock: threading.Lock


class RedisArchiveReader:
    """An :class:`~worker.conversation.recall.archive.Archive` that searches the archive the commits write to Redis.

    It only reads: messages reach the archive inside the commit that drops them from the history (a fenced script),
    never through :meth:`append`. ``client`` returns bytes (no ``decode_responses``). Thread-safe."""

    def __init__(self, client: Any, keys: Callable[[str], ConversationKeys], *, counter: TokenCounter | None = None,
                 cached_conversations: int = DEFAULT_CACHED_CONVERSATIONS) -> None:
        self._client = client
        self._keys = keys
        self._counter = counter
        self._cached = cached_conversations
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def append(self, conversation_id: str, messages: Sequence[ArchivedMessage]) -> list[ArchivedMessage]:
        """Nothing: the commit that drops ``messages`` from the history archives them in its own fenced step (a
        write from here would land even when that commit is fenced out, or twice when it is retried)."""
        return []

    def erase(self, conversation_id: str) -> None:
        """Forget the cached segments only: the commit of a reset phrase (or a forget, or a delete) erases the keys
        in its own fenced step, for the same reason as :meth:`append`."""
        with self._lock:
            self._cache.pop(conversation_id, None)

    def search(self, conversation_id: str, query: str, *, max_tokens: int) -> list[Recalled]:
        entry = self._entry(conversation_id)
        if entry is None:
            return []
        with entry.lock:  # a fold changes the last index: a search of the same conversation waits for it
            return recall(Segments(tuple(entry.indexes)), query, max_tokens=max_tokens, counter=self._counter)

    def segments(self, conversation_id: str) -> Segments:
        """The conversation's segments as they are now (small ones folded), decoding only those not decoded
        before."""
        entry = self._entry(conversation_id)
        return Segments(() if entry is None else tuple(entry.indexes))

    def _entry(self, conversation_id: str) -> _Entry | None:
        key = self._keys(conversation_id).recall_index
        with self._lock:
            entry = self._cache.get(conversation_id)
        read = entry.read if entry is not None else 0
        # One round trip, no transaction: a segment appended between the two commands makes the figures disagree,
        # and the list is then read whole, as after a merge.
        pipe = self._client.pipeline(transaction=False)
        pipe.llen(key)
        pipe.lrange(key, read, -1)
        length, tail = pipe.execute()
        if entry is not None and length == read + len(tail):
            if tail:
                with entry.lock:
                    _take(entry, tail)
        else:  # new to this process, or merged (or erased) since: read it whole
            entry = _Entry([], 0, False, threading.Lock())
            _take(entry, self._client.lrange(key, 0, -1) if read else tail)
        with self._lock:
            if entry.read == 0:
                self._cache.pop(conversation_id, None)
                return None
            self._cache[conversation_id] = entry
            self._cache.move_to_end(conversation_id)
            while len(self._cache) > self._cached:
                self._cache.popitem(last=False)
        return entry


def _take(entry: _Entry, segments: Sequence[bytes]) -> None:
    """Decode ``segments`` onto ``entry``: a large one stays an index of its own; small ones are added to the last
    index when it is itself a fold of small ones, otherwise they begin one."""
    for data in segments:
        index = SearchIndex.from_bytes(bytes(data))
        small = len(index) < FOLD_BELOW
        if small and entry.last_folded:
            entry.indexes[-1].add(index.messages(0, len(index) - 1).values())
        else:
            entry.indexes.append(index)
        entry.last_folded = small
        entry.read += 1
