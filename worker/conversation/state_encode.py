"""Writing a conversation state: a blob written whole (a base), or the stored blob with one frame appended when the
state only grew at its end, the frames folded into a compressed run once they add up (:mod:`.state_format`)."""

from __future__ import annotations

import operator
import queue
from dataclasses import dataclass
from typing import Any

import msgpack
import zstandard

from worker.conversation.message_times import to_seconds
from worker.conversation.messages import Message
from worker.conversation.model import Usage
from worker.conversation.state_format import (
    BASE_LEN,
    COMPRESS_OVER,
    FLAG_ZSTD,
    FOLD_AT,
    FORMAT_VERSION,
    MAGIC,
    TIMES_VERSION,
    WRITABLE_VERSIONS,
)
from worker.conversation.state_model import ConversationState, Meta


def encode_message(message: Message, times: bool = True) -> dict[str, Any]:
    """A message's msgpack map; its time (``t``, whole seconds) only with ``times`` (a format that keeps them)."""
    fields: dict[str, Any] = {"r": message.role, "s": message.seq}
    if message.content:
        fields["c"] = message.content
    if message.tool_calls:
        fields["tc"] = [[call.id, call.name, call.arguments] for call in message.tool_calls]
    if message.tool_call_id is not None:
        fields["ti"] = message.tool_call_id
    if message.name is not None:
        fields["n"] = message.name
    if message.is_error:
        fields["e"] = True
    if message.pinned:
        fields["p"] = True
    if message.raw is not None:
        fields["raw"] = message.raw
    if message.media is not None:
        # The reference only, never the bytes.
        fields["md"] = [message.media.kind, message.media.id, message.media.mime_type]
    if message.facts:
        fields["f"] = [list(f) for f in message.facts]  # a journalled tool result's (never in a stored history)
    if message.reply_parts:
        fields["rp"] = list(message.reply_parts)  # likewise
    if times and message.at is not None:
        fields["t"] = to_seconds(message.at)
    return fields


def encode_usage(usage: Usage | None) -> list[int] | None:
    if usage is None:
        return None
    return [usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, usage.cache_creation_tokens]


def _enc_meta(meta: Meta) -> list[Any]:
    return [meta.epoch, meta.started_at, meta.last_activity, meta.turns, meta.events, meta.compactions]


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class Memo:
    """What a conversation's stored blob is: the state it holds, the blob itself (``stored``, byte for byte what
    the store has) and how its last write went. ``written_from`` is where the last write's new bytes start: 0 when
    the blob was written whole, else the length of the blob it appended a frame to (the store then sends only
    ``stored[written_from:]``). ``raw`` is about the decoded size (the uncompressed base plus the frames), for
    the worker's cache of decoded states."""

    state: ConversationState
    stored: bytes
    written_from: int = 0
    raw: int = 0
    loose: int = 0  # where the frames not folded yet start in ``stored`` (its length when there are none; 0: unknown)
    replaced: bytes = b""  # of the blob the last write was made on: the bytes from written_from it folded

    @property
    def basis(self) -> int:
        """The length of the blob the last write was made on (0 when it was written whole): the store refuses the
        write unless it still holds a blob that long (see :attr:`written_from`)."""
        return self.written_from + len(self.replaced) if self.written_from else 0


def _frame(state: ConversationState, memo: Memo, version: int) -> bytes | None:
    """The frame that turns ``memo``'s stored state into ``state``, or ``None`` when ``state`` is not that state
    grown at its end: a compaction, a reset, a drop to fit the size limit, a change of summary or pinned items (then
    the blob is written whole). What a turn changes besides the history (counters, usage, metadata) rides in
    every frame, and the facts when they changed: a frame is the new messages plus a fixed few dozen bytes."""
    before = memo.state
    old, new = before.messages, state.messages
    if (memo.stored[3] != version or len(new) < len(old) or state.provider != before.provider
            or state.meta.epoch != before.meta.epoch or state.meta.started_at != before.meta.started_at
            or state.generation != before.generation or state.summary_seq != before.summary_seq
            or state.summary != before.summary or not _same(state.pinned, before.pinned)
            or state.preamble_facts != before.preamble_facts or not _same(new[:len(old)], old)):
        return None
    meta = state.meta  # what a frame may change of it (a new epoch is a reset: written whole)
    times = version >= TIMES_VERSION
    delta: dict[str, Any] = {"m": [encode_message(m, times) for m in new[len(old):]], "ns": state.next_seq,
                             "seen": state.seen_seq, "u": encode_usage(state.last_usage),
                             "meta": [meta.last_activity, meta.turns, meta.events, meta.compactions]}
    if state.facts is not before.facts and state.facts != before.facts:
        delta["f"] = [[f.key, f.text] for f in state.facts]
    return _pack(delta)


def _same(a: tuple[Message, ...], b: tuple[Message, ...]) -> bool:
    """The same messages, by identity (messages are immutable: a turn keeps the very objects it read)."""
    return a is b or (len(a) == len(b) and all(map(operator.is_, a, b)))


def _payload(state: ConversationState, version: int) -> bytes:
    """The msgpack map of the whole state (a blob's base)."""
    times = version >= TIMES_VERSION
    fields: dict[str, Any] = {
        "p": state.provider, "m": [encode_message(m, times) for m in state.messages], "sum": state.summary,
        "sums": state.summary_seq, "pin": [encode_message(m, times) for m in state.pinned], "ns": state.next_seq,
        "seen": state.seen_seq, "u": encode_usage(state.last_usage), "g": state.generation, "meta": _enc_meta(state.meta),
    }
    if state.facts:
        fields["f"] = [[f.key, f.text] for f in state.facts]
    if state.preamble_facts:
        fields["pf"] = [[f.key, f.text] for f in state.preamble_facts]
    return _pack(fields)


def _encode_whole(state: ConversationState, version: int) -> tuple[bytes, Memo]:
    body = _payload(state, version)
    raw, flags = len(body), 0
    if raw > COMPRESS_OVER:
        body = _compress(body)
        flags |= FLAG_ZSTD
    blob = MAGIC + bytes([version, flags]) + BASE_LEN.pack(len(body)) + body
    return blob, Memo(state, blob, 0, raw, len(blob))


def check_version(version: int) -> int:
    """``version`` when a writer may write it (:data:`~.state_format.WRITABLE_VERSIONS`), else ``ValueError``."""
    if version not in WRITABLE_VERSIONS:
        raise ValueError(f"a state is written in format {' or '.join(map(str, WRITABLE_VERSIONS))}, not {version!r}")
    return version


def encode_with_memo(state: ConversationState, memo: Memo | None = None, *,
                     version: int = FORMAT_VERSION) -> tuple[bytes, Memo]:
    """:func:`encode_state`, knowing what ``memo`` (the conversation's stored blob) holds: when ``state`` is that
    state grown at its end (a turn, an event), the blob is the stored one with one frame appended, and the store
    writes only the frame (see :attr:`Memo.written_from`). Otherwise, and for a blob of another format than
    ``version`` (the one written), the state is written whole. Returns the blob and the memo of it."""
    if memo is not None:
        if state is memo.state and memo.stored[3] == version:  # nothing changed: the same blob, nothing to append
            return memo.stored, Memo(state, memo.stored, 0, memo.raw, memo.loose)
        frame = _frame(state, memo, version)
        if frame is not None:
            return _appended(state, memo, frame)
    return _encode_whole(state, check_version(version))


def _appended(state: ConversationState, memo: Memo, frame: bytes) -> tuple[bytes, Memo]:
    """``memo``'s blob with ``frame`` appended; when the frames appended since the last fold reach :data:`FOLD_AT`
    bytes, they and ``frame`` are folded into one compressed run (a msgpack ``bin`` of the zstd of the frames) in
    their place. A fold writes a run of at most about ``FOLD_AT`` compressed bytes, whatever the history's length:
    the bytes a turn writes stay flat, and the history in Redis takes what it compresses to (about 0.4x on chat
    text, against frames that were never compressed before format 5: zstd gains little on one frame of a few hundred
    bytes, much on a dozen)."""
    old = memo.stored
    loose = memo.loose or len(old)
    if len(old) - loose + len(frame) < FOLD_AT:
        stored = old + frame
        return stored, Memo(state, stored, len(old), memo.raw + len(frame), loose)
    run = _pack(_compress(old[loose:] + frame))
    stored = old[:loose] + run
    return stored, Memo(state, stored, loose, memo.raw + len(frame), len(stored), old[loose:])


# A compression context costs more to set up (~10 µs) than compressing a typical state: reuse them. A pool, not a
# thread-local, since a gevent worker has a greenlet per turn and would keep a context per greenlet. Level 1, not
# zstd's default 3: on a 47 KB history of varied text level 1 took 95 µs against 175 µs for a blob 0.5% larger.
# Only whole writes (compaction, a reset) compress; a turn's appended frame goes uncompressed.
_ZSTD_LEVEL = 1
_COMPRESSORS: queue.SimpleQueue[zstandard.ZstdCompressor] = queue.SimpleQueue()


def _compress(body: bytes) -> bytes:
    try:
        compressor = _COMPRESSORS.get_nowait()
    except queue.Empty:
        compressor = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)
    try:
        return compressor.compress(body)
    finally:
        _COMPRESSORS.put(compressor)


def encode_state(state: ConversationState, *, version: int = FORMAT_VERSION) -> bytes:
    """Serialise ``state`` whole, in format ``version`` (the newest unless told). Size limits are the caller's (see
    :func:`worker.conversation.chat.Chat`)."""
    return _encode_whole(state, check_version(version))[0]
