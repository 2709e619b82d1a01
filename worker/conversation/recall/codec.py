"""The archive's bytes: a batch of archived messages, versioned and compressed, and the bound that keeps the newest.

Layout: one version byte, then a zstandard frame of a msgpack array of ``[id, speaker, text, at]`` rows (``at`` in
microseconds since the epoch, UTC, or nil), with zstandard's checksum so that a damaged batch is an error, never
other text. zstandard because the state already uses it and, measured on varied chat text (bench/recall_search.py),
it packs about as tight as zlib's best and decompresses much faster (lzma packs tighter but decompresses far slower,
on every read of the batches); the speaker is a small integer.
Batches concatenate: an archive written by many commits is the batches in order, and :func:`decode_archive` reads
them all.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgpack
import zstandard

from worker.conversation.recall.archived import SPEAKERS, ArchivedMessage
from worker.errors import ArchiveDecodeError, InvalidMessageError

VERSION = 1
_LEVEL = 9
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: No archive this large is ever written; a frame claiming more is corrupt (and decompressing it could exhaust memory).
MAX_DECODED_BYTES = 256 * 1024 * 1024
_LENGTH = 4  # each batch is framed by its length, so batches can be appended without reading what is there


def _micros(at: datetime | None) -> int | None:
    return None if at is None else (at - _EPOCH) // timedelta(microseconds=1)


def encode_batch(messages: Sequence[ArchivedMessage]) -> bytes:
    """One batch, framed so that it can be appended to an archive's bytes as they are."""
    rows = [[m.id, SPEAKERS.index(m.speaker), m.text, _micros(m.at)] for m in messages]
    packed = msgpack.packb(rows, use_bin_type=True, unicode_errors="surrogatepass")
    body = bytes([VERSION]) + zstandard.ZstdCompressor(level=_LEVEL, write_checksum=True).compress(packed)
    return len(body).to_bytes(_LENGTH, "big") + body


def _row(row: Any) -> ArchivedMessage:
    if not (isinstance(row, list) and len(row) == 4):
        raise ArchiveDecodeError("invalid", "a row is not [id, speaker, text, at]")
    ident, speaker, text, at = row
    if not (isinstance(ident, str) and isinstance(text, str) and type(speaker) is int and 0 <= speaker < len(SPEAKERS)):
        raise ArchiveDecodeError("invalid", "a row's id, speaker or text has the wrong type")
    if at is not None and type(at) is not int:
        raise ArchiveDecodeError("invalid", "a row's time is not an integer")
    try:
        when = None if at is None else _EPOCH + timedelta(microseconds=at)
        return ArchivedMessage(ident, SPEAKERS[speaker], text, when)
    except (OverflowError, InvalidMessageError) as exc:
        raise ArchiveDecodeError("invalid", str(exc)) from exc


def _packed(body: bytes, decompressor: zstandard.ZstdDecompressor) -> bytes:
    """A batch's body checked for its version and decompressed: its msgpack bytes."""
    if not body or body[0] != VERSION:
        raise ArchiveDecodeError("version", f"unknown archive version {body[:1].hex() or 'none'}")
    try:
        return decompressor.decompress(body[1:], max_output_size=MAX_DECODED_BYTES)
    except (zstandard.ZstdError, ValueError) as exc:
        raise ArchiveDecodeError("corrupt", f"{type(exc).__name__}: {exc}") from exc


def _decode_body(body: bytes) -> list[ArchivedMessage]:
    packed = _packed(body, zstandard.ZstdDecompressor())
    try:
        rows = msgpack.unpackb(packed, raw=False, unicode_errors="surrogatepass", strict_map_key=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise ArchiveDecodeError("corrupt", f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(rows, list):
        raise ArchiveDecodeError("invalid", "a batch is not a list of rows")
    return [_row(row) for row in rows]


def _bodies(data: bytes) -> Iterator[bytes]:
    """Each batch's body of an archive's bytes, in order (the length frames checked)."""
    view = memoryview(data)
    at = 0
    while at < len(view):
        if len(view) - at < _LENGTH:
            raise ArchiveDecodeError("corrupt", "a batch's length is cut short")
        size = int.from_bytes(view[at:at + _LENGTH], "big")
        start = at + _LENGTH
        if size == 0 or start + size > len(view):
            raise ArchiveDecodeError("corrupt", f"a batch claims {size} bytes, {len(view) - start} are left")
        yield bytes(view[start:start + size])
        at = start + size


def decode_archive(data: bytes) -> list[ArchivedMessage]:
    """Every message of an archive's bytes (one or many appended batches), oldest first.

    Raises :class:`~worker.errors.ArchiveDecodeError` on bytes that are not such batches (cut short, corrupt, of
    another version); nothing is guessed."""
    return [message for body in _bodies(data) for message in _decode_body(body)]


def count_archive(data: bytes) -> int:
    """How many messages an archive's bytes hold, reading each batch's row count and not its rows: what an
    inspection of a conversation (its summary, which a producer may ask for often) pays, a fraction of
    :func:`decode_archive`. Raises :class:`~worker.errors.ArchiveDecodeError` as it does."""
    count = 0
    decompressor = zstandard.ZstdDecompressor()
    for body in _bodies(data):
        unpacker = msgpack.Unpacker(raw=False)
        unpacker.feed(_packed(body, decompressor))
        try:
            count += unpacker.read_array_header()
        except (ValueError, msgpack.FormatError, msgpack.StackError, msgpack.OutOfData) as exc:
            raise ArchiveDecodeError("corrupt", f"{type(exc).__name__}: {exc}") from exc
    return count


def new_messages(archived: Iterable[ArchivedMessage], incoming: Iterable[ArchivedMessage]) -> list[ArchivedMessage]:
    """The messages of ``incoming`` whose ids the archive does not hold yet, each once, in order: what makes
    archiving the same messages twice (a retried commit) a no-op."""
    seen = {m.id for m in archived}
    fresh: list[ArchivedMessage] = []
    for message in incoming:
        if message.id not in seen:
            seen.add(message.id)
            fresh.append(message)
    return fresh


def bound_newest(messages: Sequence[ArchivedMessage], max_bytes: int) -> list[ArchivedMessage]:
    """The newest messages of ``messages`` (oldest first out) whose batch encodes to at most ``max_bytes``.

    Compressed sizes do not add up message by message, so the cut is found by bisection over how many of the
    oldest to drop (about log2(n) encodings); the result is the longest suffix that fits."""
    if max_bytes < 0:
        raise ValueError("max_bytes must be >= 0")
    if len(encode_batch(messages)) <= max_bytes:
        return list(messages)
    low, high = 1, len(messages)  # dropping `high` (all) always fits: an empty list is written as nothing
    while low < high:
        middle = (low + high) // 2
        if len(encode_batch(messages[middle:])) <= max_bytes:
            high = middle
        else:
            low = middle + 1
    return list(messages[high:]) if high < len(messages) else []
