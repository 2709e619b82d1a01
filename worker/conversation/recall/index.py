"""A conversation's search index: SQLite's FTS5 (in memory, stdlib) over the archived messages' folded terms,
ranked by FTS5's BM25, storable as bytes.

Why FTS5 over a stored database (bench/recall_search.py measures the alternatives): building any index per search
means folding and splitting every archived text in Python, which alone is far over a turn's budget at thousands of
messages, while loading a stored FTS5 database (``deserialize``, one copy) and asking it runs in C. The terms are
folded and split here (:mod:`~worker.conversation.recall.terms`) and given to FTS5's ``ascii`` tokenizer, which splits on spaces and
keeps every non-ASCII character, so bigrams of Chinese or Thai and emoji reach the index as they are; Porter's
stemmer then folds English inflections.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

import zstandard

from worker.conversation.recall.archived import SPEAKERS, ArchivedMessage
from worker.conversation.recall.terms import terms
from worker.errors import ArchiveDecodeError, InvalidMessageError

_SCHEMA = (
    "CREATE TABLE message (position INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, speaker INTEGER NOT NULL,"
    " at INTEGER, text TEXT NOT NULL)",
    # Contentless: the texts are in `message`, the index need not keep its own copy (less than half the bytes).
    # detail=full: with a contentless table, FTS5's bm25() scores every row 0 under detail=column.
    # Porter's stemmer: "looking for the lantern" finds "look for lanterns"; on the bench's planted facts it found
    # inflected ones and made nothing else worse.
    "CREATE VIRTUAL TABLE term USING fts5(terms, tokenize='porter ascii', content='')",
)
_MAGIC = b"PRI1"  # a new schema or tokenizer is a new magic: an index is rebuilt from the batches, never misread
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_INDEX_BYTES = 512 * 1024 * 1024


def _quoted(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


#: The most terms of a query that are searched: a player's paragraph (what `auto` recall searches with) has hundreds,
#: and each one costs a pass over its postings; the longest are kept, as the likeliest to be rare (names, places).
MAX_QUERY_TERMS = 24


def match_expression(query: str) -> str | None:
    """The FTS5 query for a player's words: any of its terms (BM25 ranks the messages holding more and rarer ones
    first), each quoted so that no word is read as an FTS5 operator. None when the query has no term."""
    unique = list(dict.fromkeys(terms(query)))
    if len(unique) > MAX_QUERY_TERMS:
        unique = sorted(unique, key=len, reverse=True)[:MAX_QUERY_TERMS]
    return " OR ".join(map(_quoted, unique)) if unique else None


class SearchIndex:
    """The archived messages of one conversation, in order, searchable. Not thread-safe: one owner at a time."""

    def __init__(self, connection: sqlite3.Connection | None = None) -> None:
        if connection is None:
            connection = sqlite3.connect(":memory:", check_same_thread=False)
            for statement in _SCHEMA:
                connection.execute(statement)
        self._db = connection
        self._next = int(connection.execute("SELECT coalesce(max(position) + 1, 0) FROM message").fetchone()[0])

    def __len__(self) -> int:
        return self._next

    def add(self, messages: Iterable[ArchivedMessage]) -> list[ArchivedMessage]:
        """Append the messages whose ids the index does not hold yet; returns those it appended."""
        added: list[ArchivedMessage] = []
        start = self._next
        try:
            self._add(messages, added)
        except BaseException:
            self._next = start  # the transaction was rolled back
            raise
        return added

    def _add(self, messages: Iterable[ArchivedMessage], added: list[ArchivedMessage]) -> None:
        with self._db:
            for m in messages:
                at = None if m.at is None else (m.at - _EPOCH) // timedelta(microseconds=1)
                cursor = self._db.execute(
                    "INSERT OR IGNORE INTO message (position, id, speaker, at, text) VALUES (?, ?, ?, ?, ?)",
                    (self._next, m.id, SPEAKERS.index(m.speaker), at, m.text),
                )
                if cursor.rowcount:
                    self._db.execute("INSERT INTO term (rowid, terms) VALUES (?, ?)",
                                     (self._next, " ".join(terms(m.text))))
                    self._next += 1
                    added.append(m)

    def rank(self, query: str, limit: int) -> list[int]:
        """Positions of the messages that best match ``query``, most relevant first (BM25)."""
        return [position for position, _ in self.scored(query, limit)]

    def scored(self, query: str, limit: int) -> list[tuple[int, float]]:
        """:meth:`rank` with each position's BM25 score (lower is better, as FTS5 gives it): what merges the hits
        of several indexes."""
        expression = match_expression(query)
        return [] if expression is None else self.scored_match(expression, limit)

    def scored_match(self, expression: str, limit: int) -> list[tuple[int, float]]:
        """:meth:`scored` for a query already made an FTS5 expression (:func:`match_expression`): several indexes
        searched with one query fold its terms once."""
        if limit <= 0:
            return []
        try:
            rows = self._db.execute("SELECT rowid, bm25(term) AS score FROM term WHERE term MATCH ? ORDER BY score "
                                    "LIMIT ?", (expression, limit)).fetchall()
        except sqlite3.DatabaseError as exc:
            raise ArchiveDecodeError("corrupt", f"the search index cannot be read: {exc}") from exc
        return [(int(row[0]), float(row[1])) for row in rows]

    def messages(self, first: int, last: int) -> dict[int, ArchivedMessage]:
        """The messages at positions ``first`` to ``last`` (inclusive) that exist, by position."""
        try:
            rows = self._db.execute("SELECT position, id, speaker, at, text FROM message WHERE position BETWEEN ? AND ?",
                                    (first, last)).fetchall()
            return {int(p): _message(i, s, a, t) for p, i, s, a, t in rows}
        except (sqlite3.DatabaseError, IndexError, TypeError, OverflowError, InvalidMessageError) as exc:
            raise ArchiveDecodeError("corrupt", f"an archived message cannot be read: {exc}") from exc

    def to_bytes(self) -> bytes:
        """The index as compressed bytes (what a store keeps; :meth:`from_bytes` reads it)."""
        return _MAGIC + zstandard.ZstdCompressor(level=3, write_checksum=True).compress(self._db.serialize())

    @classmethod
    def from_bytes(cls, data: bytes) -> SearchIndex:
        """An index from :meth:`to_bytes`'s bytes; :class:`~worker.errors.ArchiveDecodeError` when they are not."""
        if data[:len(_MAGIC)] != _MAGIC:
            raise ArchiveDecodeError("version", "not a search index of a known version")
        connection = sqlite3.connect(":memory:", check_same_thread=False)
        try:
            raw = zstandard.ZstdDecompressor().decompress(data[len(_MAGIC):], max_output_size=_MAX_INDEX_BYTES)
            connection.deserialize(raw)
            connection.execute("SELECT rowid FROM term WHERE term MATCH '\"x\"' LIMIT 1").fetchall()
            return cls(connection)
        except (zstandard.ZstdError, sqlite3.DatabaseError) as exc:
            connection.close()
            raise ArchiveDecodeError("corrupt", f"the search index cannot be read: {exc}") from exc

    @classmethod
    def of(cls, messages: Sequence[ArchivedMessage]) -> SearchIndex:
        index = cls()
        index.add(messages)
        return index


def _message(ident: str, speaker: int, at: int | None, text: str) -> ArchivedMessage:
    when = None if at is None else _EPOCH + timedelta(microseconds=at)
    return ArchivedMessage(ident, SPEAKERS[speaker], text, when)
