"""The conversation state and its codec.

Outside this package the state is opaque ``bytes``. Inside, it is :class:`ConversationState`: the history,
the rolling summary, pinned items, what the model has already seen, the last provider-reported usage and
the conversation's metadata.

Wire format: ``b"PLY"`` + one format byte + one flags byte + the rest. Since version 4 the rest is a
four-byte big-endian length, the *base* (a msgpack map of the whole state, zstd-compressed when the flag says so:
bases over ``COMPRESS_OVER`` bytes), then any number of *frames*: msgpack maps, uncompressed, each what one write
added (the new messages, the counters, usage, the metadata but the epoch and start, and the facts when they changed;
see :func:`_frame`).
A turn that only grows the history appends one frame, so the store writes only the frame (Redis ``RPUSH``); a
compaction, a reset or anything else that rewrites the past writes the state whole, as a new base with no frames.
Since version 5 the frames may also be *runs*: once the loose frames (those after the base or the last run) reach
:data:`FOLD_AT` bytes, the write that would append one more replaces them and it with one msgpack ``bin``, the zstd
of those frames (see :func:`_appended`): a bounded write, and the history takes what it compresses to in Redis.
Before version 4 the rest was the base alone. The format byte is the schema version; :data:`MIGRATIONS` upgrades
every older version step by step (each only added optional fields: version 2 photos, a user message's media
reference; version 3 keyed facts, ``facts``: the game's facts that replace, see :class:`Fact`; version 4 the
frames; version 5 ``preamble_facts``, the facts as the preamble shows them, and the runs), and golden blobs of each
version pin that they keep decoding. Every write is the current version (a blob of version 4 is written whole by its
next write, then appended to): the previous release refuses a state of this one (``StateDecodeError("version")``)
instead of misreading it. Decoding
is bounded (size, nesting, lengths, decompressed size) and never trusts a declared length.
"""

from __future__ import annotations

import operator
import queue
import struct
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import msgpack
import zstandard

from worker.conversation.history import CleanPrefix
from worker.conversation.messages import ROLES, MediaRef, Message, ToolCall
from worker.conversation.model import Usage
from worker.conversation.tokens import CountedPrefix
from worker.errors import StateDecodeError

MAGIC = b"PLY"
FORMAT_VERSION = 5
MEDIA_VERSION = 2  # the first version with media references
FACTS_VERSION = 3  # the first version with keyed facts
LOG_VERSION = 4  # the first version of a base then appended frames
PREAMBLE_FACTS_VERSION = 5  # the first version with the facts as of the preamble's last rewrite
FOLD_VERSION = 5  # the first version whose frames may be folded into compressed runs
FORMAT_VERSION_BYTE = bytes([FORMAT_VERSION])
FOLD_AT = 4096  # uncompressed frames past this many bytes are folded into one compressed run
_BASE_LEN = struct.Struct(">I")
FLAG_ZSTD = 0x01
COMPRESS_OVER = 4096
DEFAULT_MAX_STATE_BYTES = 1 << 20  # 1 MiB encoded


@dataclass(frozen=True, slots=True)
class Meta:
    """When the conversation started and how far it has got. ``epoch`` names one conversation's life:
    a reset starts a new epoch, so a compaction computed before the reset is never spliced after it."""

    epoch: str = ""
    started_at: float = 0.0
    last_activity: float = 0.0
    turns: int = 0
    events: int = 0
    compactions: int = 0

    def after_turn(self, now: float) -> Meta:
        """One more turn, the last activity at ``now`` (built directly, as :func:`_changed` is, and tested alike)."""
        return Meta(self.epoch, self.started_at, now, self.turns + 1, self.events, self.compactions)


@dataclass(frozen=True, slots=True)
class Fact:
    """A fact the game keeps current ("The player's target is Harrogate Theatre"): one per ``key``, the latest
    wins. Only the game sets one (an event sent with ``key``, or a game tool's answer): never a player's words."""

    key: str
    text: str


@dataclass(frozen=True, slots=True)
class ConversationState:
    """Everything Parley remembers of one conversation.

    - ``messages``: the history the model will read (no leading system prompt: that is given fresh).
    - ``summary``: the rolling summary of exchanges folded out of ``messages``; ``summary_seq`` is the
      highest ``seq`` folded into it.
    - ``pinned``: pinned items whose exchange was compacted away; rendered into the preamble.
    - ``next_seq``: the ``seq`` the next message gets. ``seen_seq``: the highest ``seq`` the model saw.
    - ``last_usage``: what the provider reported for the last round trip.
    - ``generation``: bumped by every compaction, so a stale compaction result is never spliced.
    - ``facts``: the keyed facts, oldest set first; outside the history, so no compaction touches them. Where the
      prompt shows them is ``Chat.facts_placement``'s choice (:mod:`worker.conversation.prompt`).
    - ``preamble_facts``: the facts as they were when the start of the prompt was last rewritten anyway (a
      compaction that changed the summary, the pinned items or the history's start; a fresh conversation): with
      the default placement the preamble shows these, and only the facts that changed since go after the history.
      Empty in a state from before version 5: every fact then counts as changed (all after the history).
    """

    provider: str
    messages: tuple[Message, ...] = ()
    summary: str = ""
    summary_seq: int = 0
    pinned: tuple[Message, ...] = ()
    next_seq: int = 1
    seen_seq: int = 0
    last_usage: Usage | None = None
    generation: int = 0
    meta: Meta = field(default_factory=Meta)
    facts: tuple[Fact, ...] = ()
    preamble_facts: tuple[Fact, ...] = ()

    @classmethod
    def fresh(cls, provider: str, *, now: float | None = None) -> ConversationState:
        started = time.time() if now is None else now
        return cls(provider=provider, meta=Meta(epoch=uuid.uuid4().hex[:16], started_at=started, last_activity=started))

    def append(self, *messages: Message) -> ConversationState:
        """A new state with ``messages`` appended, each given the next ``seq``."""
        seq = self.next_seq
        added = []
        for m in messages:
            added.append(m.with_seq(seq))
            seq += 1
        return _changed(self, self.messages + tuple(added), seq, self.seen_seq, self.last_usage, self.meta)

    def with_usage(self, usage: Usage, seen_seq: int) -> ConversationState:
        """A new state recording a round trip's reported ``usage`` and the highest ``seq`` its prompt held."""
        return _changed(self, self.messages, self.next_seq, seen_seq, usage, self.meta)

    def with_meta(self, meta: Meta) -> ConversationState:
        """A new state with ``meta`` in place of its metadata."""
        return _changed(self, self.messages, self.next_seq, self.seen_seq, self.last_usage, meta)

    def with_fact(self, key: str, text: str) -> ConversationState:
        """A new state where ``key`` holds ``text``: the fact with that key before is gone (latest wins) and the new
        one is the newest (the cap drops the oldest facts first)."""
        kept = tuple(f for f in self.facts if f.key != key)
        return ConversationState(self.provider, self.messages, self.summary, self.summary_seq, self.pinned,
                                 self.next_seq, self.seen_seq, self.last_usage, self.generation, self.meta,
                                 (*kept, Fact(key, text)), self.preamble_facts)

    @property
    def last_seq(self) -> int:
        return self.next_seq - 1


def _changed(state: ConversationState, messages: tuple[Message, ...], next_seq: int, seen_seq: int,
             last_usage: Usage | None, meta: Meta) -> ConversationState:
    """``state`` with the fields a turn changes replaced: what :func:`dataclasses.replace` does, built directly. A turn
    makes several new states and ``replace`` walks the fields' metadata each time (about twice the cost). Every
    field is passed, in order: tests/conversation/test_state_codec.py fails when a field is added and not here."""
    return ConversationState(state.provider, messages, state.summary, state.summary_seq, state.pinned, next_seq,
                             seen_seq, last_usage, state.generation, meta, state.facts, state.preamble_facts)


# --- encoding -------------------------------------------------------------------------------------

def _enc_message(message: Message) -> dict[str, Any]:
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
    return fields


def _enc_usage(usage: Usage | None) -> list[int] | None:
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


def _frame(state: ConversationState, memo: Memo) -> bytes | None:
    """The frame that turns ``memo``'s stored state into ``state``, or ``None`` when ``state`` is not that state
    grown at its end: a compaction, a reset, a drop to fit the size limit, a change of summary or pinned items (then
    the blob is written whole). What a turn changes besides the history (counters, usage, metadata) rides in
    every frame, and the facts when they changed: a frame is the new messages plus a fixed few dozen bytes."""
    before = memo.state
    old, new = before.messages, state.messages
    if (memo.stored[3:4] != FORMAT_VERSION_BYTE or len(new) < len(old) or state.provider != before.provider
            or state.meta.epoch != before.meta.epoch or state.meta.started_at != before.meta.started_at
            or state.generation != before.generation or state.summary_seq != before.summary_seq
            or state.summary != before.summary or not _same(state.pinned, before.pinned)
            or state.preamble_facts != before.preamble_facts or not _same(new[:len(old)], old)):
        return None
    meta = state.meta  # what a frame may change of it (a new epoch is a reset: written whole)
    delta: dict[str, Any] = {"m": [_enc_message(m) for m in new[len(old):]], "ns": state.next_seq,
                             "seen": state.seen_seq, "u": _enc_usage(state.last_usage),
                             "meta": [meta.last_activity, meta.turns, meta.events, meta.compactions]}
    if state.facts is not before.facts and state.facts != before.facts:
        delta["f"] = [[f.key, f.text] for f in state.facts]
    return _pack(delta)


def _same(a: tuple[Message, ...], b: tuple[Message, ...]) -> bool:
    """The same messages, by identity (messages are immutable: a turn keeps the very objects it read)."""
    return a is b or (len(a) == len(b) and all(map(operator.is_, a, b)))


def _payload(state: ConversationState) -> bytes:
    """The msgpack map of the whole state (a blob's base)."""
    fields: dict[str, Any] = {
        "p": state.provider, "m": [_enc_message(m) for m in state.messages], "sum": state.summary,
        "sums": state.summary_seq, "pin": [_enc_message(m) for m in state.pinned], "ns": state.next_seq,
        "seen": state.seen_seq, "u": _enc_usage(state.last_usage), "g": state.generation, "meta": _enc_meta(state.meta),
    }
    if state.facts:
        fields["f"] = [[f.key, f.text] for f in state.facts]
    if state.preamble_facts:
        fields["pf"] = [[f.key, f.text] for f in state.preamble_facts]
    return _pack(fields)


def _encode_whole(state: ConversationState) -> tuple[bytes, Memo]:
    body = _payload(state)
    raw, flags = len(body), 0
    if raw > COMPRESS_OVER:
        body = _compress(body)
        flags |= FLAG_ZSTD
    blob = MAGIC + bytes([FORMAT_VERSION, flags]) + _BASE_LEN.pack(len(body)) + body
    return blob, Memo(state, blob, 0, raw, len(blob))


def encode_with_memo(state: ConversationState, memo: Memo | None = None) -> tuple[bytes, Memo]:
    """:func:`encode_state`, knowing what ``memo`` (the conversation's stored blob) holds: when ``state`` is that
    state grown at its end (a turn, an event), the blob is the stored one with one frame appended, and the store
    writes only the frame (see :attr:`Memo.written_from`). Otherwise, and for a blob of a format before frames,
    the state is written whole. Returns the blob and the memo of it."""
    if memo is not None:
        if state is memo.state:  # nothing changed: the same blob, and nothing to append
            return memo.stored, Memo(state, memo.stored, 0, memo.raw, memo.loose)
        frame = _frame(state, memo)
        if frame is not None:
            return _appended(state, memo, frame)
    return _encode_whole(state)


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


def encode_state(state: ConversationState) -> bytes:
    """Serialise ``state`` whole. Size limits are the caller's (see :func:`worker.conversation.chat.Chat`)."""
    return _encode_whole(state)[0]


# --- decoding -------------------------------------------------------------------------------------

def _need(cond: bool, what: str) -> None:
    if not cond:
        raise StateDecodeError("invalid", what)




def _dec_message(fields: Any) -> Message:
    # Hot path (every message of every turn): one type check per field, no helper calls on the common path.
    if type(fields) is not dict:
        raise StateDecodeError("invalid", "message is not a map")
    role = fields.get("r")
    content = fields.get("c", "")
    seq = fields.get("s", 0)
    if role not in ROLES or type(content) is not str or type(seq) is not int or seq < 0:
        raise StateDecodeError("invalid", f"bad message (role {role!r})")
    calls: tuple[ToolCall, ...] = ()
    tc = fields.get("tc")
    if tc is not None:
        _need(isinstance(tc, list), "bad tool calls")
        out = []
        for call in tc:
            _need(isinstance(call, list) and len(call) == 3 and all(isinstance(x, str) for x in call), "bad tool call")
            out.append(ToolCall(id=call[0], name=call[1], arguments=call[2]))
        calls = tuple(out)
    ti = fields.get("ti")
    name = fields.get("n")
    raw = fields.get("raw")
    if (ti is not None and type(ti) is not str) or (name is not None and type(name) is not str) or (
            raw is not None and type(raw) is not dict):
        raise StateDecodeError("invalid", "bad tool_call_id, name or raw")
    md = fields.get("md")
    media = None if md is None else _dec_media(md, role)
    f = fields.get("f")
    facts = () if f is None else tuple((x.key, x.text) for x in _dec_facts(f))
    rp = fields.get("rp", [])
    _need(isinstance(rp, list) and all(isinstance(p, dict) for p in rp), "bad reply parts")
    return Message(role, content, calls, ti, name, bool(fields.get("e", False)), bool(fields.get("p", False)), seq, raw,
                   media, facts, tuple(rp))


def _dec_media(md: Any, role: Any) -> MediaRef:
    _need(role == "user", "media on a non-user message")
    _need(isinstance(md, list) and len(md) == 3, "bad media")
    kind, mid, mime = md
    _need(kind == "image" and isinstance(mid, str) and bool(mid) and (mime is None or isinstance(mime, str)),
          "bad media")
    return MediaRef(id=mid, mime_type=mime, kind=kind)


def _dec_usage(raw: Any) -> Usage | None:
    if raw is None:
        return None
    _need(isinstance(raw, list) and len(raw) == 4 and all(isinstance(x, int) for x in raw), "bad usage")
    return Usage(*raw)


def _dec_meta(raw: Any) -> Meta:
    _need(isinstance(raw, list) and len(raw) == 6, "bad meta")
    epoch, started, last, turns, events, compactions = raw
    _need(isinstance(epoch, str), "bad epoch")
    _need(all(isinstance(x, int | float) for x in (started, last)), "bad times")
    _need(all(isinstance(x, int) for x in (turns, events, compactions)), "bad counters")
    return Meta(epoch, float(started), float(last), turns, events, compactions)


def _dec_counters(payload: dict[str, Any], names: tuple[tuple[str, int], ...]) -> dict[str, int]:
    ints = {k: payload.get(k, d) for k, d in names}
    _need(all(isinstance(v, int) and v >= 0 for v in ints.values()), "bad counters")
    return ints


def _from_payload(payload: Any) -> ConversationState:
    _need(isinstance(payload, dict), "payload is not a map")
    provider = payload.get("p")
    _need(isinstance(provider, str) and bool(provider), "no provider")
    msgs = payload.get("m", [])
    pins = payload.get("pin", [])
    _need(isinstance(msgs, list) and isinstance(pins, list), "history is not a list")
    ints = _dec_counters(payload, (("sums", 0), ("ns", 1), ("seen", 0), ("g", 0)))
    summary = payload.get("sum", "")
    _need(isinstance(summary, str), "bad summary")
    return ConversationState(
        provider=provider,
        messages=tuple(_dec_message(m) for m in msgs),
        summary=summary,
        summary_seq=ints["sums"],
        pinned=tuple(_dec_message(m) for m in pins),
        next_seq=ints["ns"],
        seen_seq=ints["seen"],
        last_usage=_dec_usage(payload.get("u")),
        generation=ints["g"],
        meta=_dec_meta(payload.get("meta", ["", 0.0, 0.0, 0, 0, 0])),
        facts=_dec_facts(payload.get("f", ())),
        preamble_facts=_dec_facts(payload.get("pf", ())),
    )


def _with_frames(state: ConversationState, frames: list[Any]) -> ConversationState:
    """``state`` (a blob's base) with its appended frames applied in order (see :func:`_frame`)."""
    messages = list(state.messages)
    for delta in frames:
        _need(isinstance(delta, dict), "frame is not a map")
        added = delta.get("m", [])
        _need(isinstance(added, list), "frame's messages are not a list")
        messages.extend(_dec_message(m) for m in added)
        ints = _dec_counters(delta, (("ns", state.next_seq), ("seen", state.seen_seq)))
        facts = _dec_facts(delta["f"]) if "f" in delta else state.facts
        meta = delta.get("meta")
        _need(isinstance(meta, list) and len(meta) == 4, "bad frame meta")
        meta = _dec_meta([state.meta.epoch, state.meta.started_at, *meta])
        state = ConversationState(state.provider, (), state.summary, state.summary_seq, state.pinned, ints["ns"],
                                  ints["seen"], _dec_usage(delta.get("u")), state.generation, meta, facts,
                                  state.preamble_facts)
    return replace(state, messages=tuple(messages))


def _dec_facts(raw: Any) -> tuple[Fact, ...]:
    if not raw:
        return ()
    _need(isinstance(raw, list), "facts are not a list")
    out = []
    for item in raw:
        _need(isinstance(item, list) and len(item) == 2 and all(type(x) is str and x for x in item), "bad fact")
        out.append(Fact(item[0], item[1]))
    _need(len({f.key for f in out}) == len(out), "two facts with one key")
    return tuple(out)


# Each entry upgrades a payload of version N to version N+1. Version 1 is the first released format:
# the golden blobs in tests/conversation/golden/ pin it so a later version keeps decoding it.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    # Version 2 only added the optional media reference ("md") to messages: a version-1 payload is a valid
    # version-2 payload without photos.
    1: lambda payload: payload,
    # Version 3 only added the optional keyed facts ("f"): a version-2 payload is a version-3 payload without any.
    2: lambda payload: payload,
    # Version 4 changed the container, not the payload: a version-3 payload is a version-4 base with no frames.
    3: lambda payload: payload,
    # Version 5 added the optional facts as of the preamble's last rewrite ("pf"): a version-4 state has none, so every
    # fact counts as changed since and is rendered after the history, as the release of version 4 did. It also added
    # folded runs among the frames: a version-4 blob has none.
    4: lambda payload: payload,
}


def _unpack_limits(limit: int) -> dict[str, Any]:
    return {"raw": False, "strict_map_key": True, "max_str_len": limit, "max_bin_len": limit,
            "max_array_len": 1_000_000, "max_map_len": 100_000}


def _split(blob: bytes, version: int) -> tuple[bytes, bytes]:
    """A blob's base body and its frames (none before version 4, whose body runs to the end)."""
    if version < LOG_VERSION:
        return blob[5:], b""
    if len(blob) < 5 + _BASE_LEN.size:
        raise StateDecodeError("corrupt", "truncated base length")
    end = 5 + _BASE_LEN.size + _BASE_LEN.unpack_from(blob, 5)[0]
    if end > len(blob):
        raise StateDecodeError("corrupt", "the base runs past the blob")
    return blob[5 + _BASE_LEN.size:end], blob[end:]


def appended_bytes(blob: bytes) -> int:
    """How many bytes of a decodable ``blob`` are frames appended after its base (0 for a blob written whole)."""
    return len(_split(blob, blob[3])[1])


def _read_frames(frames: bytes, limit: int, version: int) -> tuple[list[Any], int, int]:
    """The frames, runs unfolded; how many bytes of ``frames`` the runs take up to the last one (the frames after
    it are the loose ones a later fold takes in); and what the runs decompressed to. ``limit`` bounds that, all
    runs together."""
    if not frames:
        return [], 0, 0
    unpacker = msgpack.Unpacker(max_buffer_size=len(frames), **_unpack_limits(limit))
    unpacker.feed(frames)
    out: list[Any] = []
    folded = budget = 0
    for item in unpacker:
        if type(item) is not bytes:
            out.append(item)
            continue
        _need(version >= FOLD_VERSION, "a folded run in a blob of before format 5")
        body = _bounded_decompress(item, limit - budget)
        budget += len(body)
        inner = msgpack.Unpacker(max_buffer_size=len(body) or 1, **_unpack_limits(limit))
        inner.feed(body)
        for frame in inner:
            _need(type(frame) is dict, "a folded run holds something else than frames")
            out.append(frame)
        folded = unpacker.tell()
    return out, folded, budget


def decode_state(blob: bytes, *, provider: str | None = None, max_bytes: int = DEFAULT_MAX_STATE_BYTES) -> ConversationState:
    """Decode a state blob, or raise :class:`~worker.errors.StateDecodeError` saying why not.

    ``provider``, when given, must match the provider the state was written for.
    """
    return decode_with_memo(blob, provider=provider, max_bytes=max_bytes).state


def decode_with_memo(blob: bytes, *, provider: str | None = None,
                     max_bytes: int = DEFAULT_MAX_STATE_BYTES) -> Memo:
    """:func:`decode_state`, answering the memo of the blob (so the next write may append to it)."""
    if not isinstance(blob, bytes | bytearray | memoryview):
        raise StateDecodeError("corrupt", f"state must be bytes, got {type(blob).__name__}")
    blob = bytes(blob)
    if len(blob) > max_bytes:
        raise StateDecodeError("oversize", f"{len(blob)} bytes > limit {max_bytes}")
    if len(blob) < 5 or blob[:3] != MAGIC:
        raise StateDecodeError("corrupt", "not a Parley state (bad magic)")
    version, flags = blob[3], blob[4]
    if version > FORMAT_VERSION or (version < FORMAT_VERSION and not _migratable(version)):
        raise StateDecodeError("version", f"format {version} is not readable by format {FORMAT_VERSION}")
    if flags & ~FLAG_ZSTD:
        raise StateDecodeError("corrupt", f"unknown flags {flags:#x}")
    # The decoded payload may be several times the blob; bound it so a bomb cannot exhaust memory.
    limit = max_bytes * 8
    try:
        body, frames = _split(blob, version)
        if flags & FLAG_ZSTD:
            body = _bounded_decompress(body, limit)
        payload = msgpack.unpackb(body, **_unpack_limits(limit))
        deltas, folded, unfolded = _read_frames(frames, limit, version)
    except StateDecodeError:
        raise
    except Exception as exc:  # msgpack and zstd raise many types; all of them mean "corrupt"
        raise StateDecodeError("corrupt", f"{type(exc).__name__}: {exc}") from None
    try:
        for v in range(version, FORMAT_VERSION):
            payload = MIGRATIONS[v](payload)
        state = _with_frames(_from_payload(payload), deltas) if deltas else _from_payload(payload)
        _need(all(m.seq < state.next_seq for m in state.messages), "seq beyond next_seq")
    except StateDecodeError:
        raise
    except Exception as exc:
        raise StateDecodeError("invalid", f"{type(exc).__name__}: {exc}") from None
    if provider is not None and state.provider != provider:
        raise StateDecodeError("provider", f"state belongs to {state.provider!r}, not {provider!r}")
    return Memo(state, blob, 0, len(body) + len(frames) + unfolded, len(blob) - len(frames) + folded)


def _migratable(version: int) -> bool:
    return version >= 1 and all(v in MIGRATIONS for v in range(version, FORMAT_VERSION))


def _bounded_decompress(body: bytes, limit: int) -> bytes:
    reader = zstandard.ZstdDecompressor().stream_reader(body)
    out = reader.read(limit + 1)
    if len(out) > limit:
        raise StateDecodeError("oversize", f"decompresses to more than {limit} bytes")
    return out


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What :func:`load_state` found: the state to continue with and, when the blob was unusable, why."""

    state: ConversationState
    problem: StateDecodeError | None = None
    memo: Memo | None = None  # what the stored blob holds (a write appending to it needs it)
    clean: CleanPrefix | None = None  # the resident's, when it came from one
    counted: CountedPrefix | None = None  # the resident's too: its history's last token count


def load_state(
    blob: bytes | None, *, provider: str, max_bytes: int = DEFAULT_MAX_STATE_BYTES, now: float | None = None
) -> LoadResult:
    """Decode ``blob`` for ``provider``; never raises. ``None`` or empty bytes start a fresh conversation;
    an unusable blob also starts one, and ``problem`` says why (for quarantine and metrics)."""
    if not blob:
        return LoadResult(ConversationState.fresh(provider, now=now))
    try:
        memo = decode_with_memo(blob, provider=provider, max_bytes=max_bytes)
    except StateDecodeError as exc:
        return LoadResult(ConversationState.fresh(provider, now=now), exc)
    return LoadResult(memo.state, memo=memo)
