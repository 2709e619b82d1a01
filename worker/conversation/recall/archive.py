"""The archive a chat searches: a small protocol, an in-memory archive, and the results a search answers.

A result is ``{"at", "speaker", "text", "context": [{"at", "speaker", "text"}...]}``: the message that matched and
the exchange around it (the answer to a player's question is often the message after it), most relevant first, all
of it within a token budget: a result's own message first, then its neighbours nearest first; a message is in the
results at most once.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol, TypedDict, runtime_checkable

from worker.conversation.recall.archived import ArchivedMessage
from worker.conversation.recall.index import SearchIndex
from worker.conversation.tokens import MESSAGE_OVERHEAD, EstimateCounter, TokenCounter

#: Messages before and after a hit that may join it as context (previous question, next answer and its follow-up).
CONTEXT_BEFORE = 1
CONTEXT_AFTER = 2
#: How many ranked hits a search considers before the token budget cuts.
CANDIDATES = 20


class RecalledMessage(TypedDict):
    at: str | None
    speaker: str
    text: str


class Recalled(RecalledMessage):
    context: list[RecalledMessage]


class Searchable(Protocol):
    """What :func:`recall` searches: one :class:`SearchIndex`, or several read as one."""

    def rank(self, query: str, limit: int) -> list[int]: ...

    def messages(self, first: int, last: int) -> dict[int, ArchivedMessage]: ...


@runtime_checkable
class Archive(Protocol):
    """Where messages that left a conversation's verbatim history are kept, searchable."""

    def append(self, conversation_id: str, messages: Sequence[ArchivedMessage]) -> list[ArchivedMessage]:
        """Archive ``messages`` (oldest first) and return those that were new: a message whose id is already there
        is skipped, so a retried write archives nothing twice."""
        ...

    def search(self, conversation_id: str, query: str, *, max_tokens: int) -> list[Recalled]:
        """The archived messages that best match ``query``, most relevant first, within ``max_tokens``."""
        ...

    def erase(self, conversation_id: str) -> None:
        """Forget everything archived for the conversation."""
        ...


def _shown(message: ArchivedMessage) -> RecalledMessage:
    return {"at": None if message.at is None else message.at.isoformat(), "speaker": message.speaker,
            "text": message.text}


def _cost(message: ArchivedMessage, counter: TokenCounter) -> int:
    return MESSAGE_OVERHEAD + counter.count_text(message.speaker) + counter.count_text(message.text)


def recall(index: Searchable, query: str, *, max_tokens: int, counter: TokenCounter | None = None) -> list[Recalled]:
    """What a search of ``index`` for ``query`` answers within ``max_tokens`` (counted by ``counter``, the four
    characters a token estimate by default). A hit that no longer fits ends the results: a lower-ranked shorter one
    is not worth more than the budget left unused."""
    counter = counter or EstimateCounter()
    budget = max_tokens
    shown: set[int] = set()
    results: list[Recalled] = []
    for position in index.rank(query, CANDIDATES):
        if position in shown:
            continue
        around = index.messages(position - CONTEXT_BEFORE, position + CONTEXT_AFTER)
        hit = around[position]
        cost = _cost(hit, counter)
        if cost > budget:
            break
        budget -= cost
        shown.add(position)
        picked: list[int] = []
        # Nearest first, the next message before the previous one: it is the likelier answer.
        for offset in (1, -1, 2):
            neighbour = around.get(position + offset)
            if neighbour is None or position + offset in shown or offset > CONTEXT_AFTER or -offset > CONTEXT_BEFORE:
                continue
            cost = _cost(neighbour, counter)
            if cost <= budget:
                budget -= cost
                shown.add(position + offset)
                picked.append(position + offset)
        results.append({**_shown(hit), "context": [_shown(around[p]) for p in sorted(picked)]})
    return results


class InMemoryArchive:
    """An :class:`Archive` in this process's memory: for the library, tests and a single process. Thread-safe."""

    def __init__(self, *, counter: TokenCounter | None = None) -> None:
        self._indexes: dict[str, SearchIndex] = {}
        self._counter = counter
        self._lock = threading.Lock()

    def append(self, conversation_id: str, messages: Sequence[ArchivedMessage]) -> list[ArchivedMessage]:
        with self._lock:
            index = self._indexes.get(conversation_id)
            if index is None:
                index = self._indexes[conversation_id] = SearchIndex()
            return index.add(messages)

    def search(self, conversation_id: str, query: str, *, max_tokens: int) -> list[Recalled]:
        with self._lock:
            index = self._indexes.get(conversation_id)
            return [] if index is None else recall(index, query, max_tokens=max_tokens, counter=self._counter)

    def erase(self, conversation_id: str) -> None:
        with self._lock:
            self._indexes.pop(conversation_id, None)
