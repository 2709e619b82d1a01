"""The conversation state and its codec.

Outside this package the state is opaque ``bytes``. Inside, it is :class:`ConversationState`: the history,
the rolling summary, pinned items, what the model has already seen, the last provider-reported usage and
the conversation's metadata.

Wire format: ``b"PLY"`` + one format byte + one flags byte + payload. The payload is a msgpack map,
zstd-compressed when the flag says so (states over ``COMPRESS_OVER`` bytes). The format byte is the
schema version; :data:`MIGRATIONS` upgrades every older version step by step. A state is written in the
oldest version that can hold it (:func:`_version_for`), so a worker of the previous release still reads
every state that needs nothing new: version 2 added photos (a user message's media reference), and only a
state holding one is written as version 2 (a version-1 reader would have dropped the photo silently and seen
an empty user message; it refuses the blob instead); version 3 added keyed facts (``facts``: the game's facts that
replace, see :class:`Fact`), and only a state holding one is written as version 3. Decoding is bounded
(size, nesting, lengths, decompressed size) and never trusts a declared length.
"""

from __future__ import annotations

import operator
import queue
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack
import zstandard

from worker.conversation.history import CleanPrefix
from worker.conversation.messages import ROLES, MediaRef, Message, ToolCall
from worker.conversation.model import Usage
from worker.errors import StateDecodeError

MAGIC = b"PLY"
FORMAT_VERSION = 3
MEDIA_VERSION = 2  # the first version with media references
FACTS_VERSION = 3  # the first version with keyed facts
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
    - ``facts``: the keyed facts, oldest set first; outside the history, so no compaction touches them, and
      rendered into the preamble after the pinned items.
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
                                 (*kept, Fact(key, text)))

    @property
    def last_seq(self) -> int:
        return self.next_seq - 1


def _changed(state: ConversationState, messages: tuple[Message, ...], next_seq: int, seen_seq: int,
             last_usage: Usage | None, meta: Meta) -> ConversationState:
    """``state`` with the fields a turn changes replaced: what :func:`dataclasses.replace` does, built directly. A turn
    makes several new states and ``replace`` walks the fields' metadata each time (about twice the cost). Every
    field is passed, in order: tests/conversation/test_state_codec.py fails when a field is added and not here."""
    return ConversationState(state.provider, messages, state.summary, state.summary_seq, state.pinned, next_seq,
                             seen_seq, last_usage, state.generation, meta, state.facts)


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


def _version_for(messages: Packed, pinned: Packed, facts: tuple[Fact, ...]) -> int:
    """The oldest format that holds a state of these messages, pinned items and facts (see the module docstring)."""
    if facts:
        return FACTS_VERSION
    return MEDIA_VERSION if messages.media or pinned.media else 1


def _enc_usage(usage: Usage | None) -> list[int] | None:
    if usage is None:
        return None
    return [usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, usage.cache_creation_tokens]


@dataclass(frozen=True, slots=True)
class Packed:
    """The encoding of a run of messages (without its array header), kept with the messages it encodes, and whether
    any of them holds a photo (which decides the format version: known here, the history is not scanned again)."""

    messages: tuple[Message, ...]
    body: bytes
    media: bool


@dataclass(frozen=True, slots=True)
class Memo:
    """How the last encoding of a conversation packed its history and pinned items. Messages are immutable and a
    turn only appends, so the next encoding reuses the packed bytes of the longest unchanged prefix (the same
    objects, compared by identity) and packs only what was added (see :func:`encode_with_memo`)."""

    messages: Packed
    pinned: Packed


_NOTHING = Packed((), b"", False)


def _array_header(length: int) -> bytes:
    if length < 16:
        return bytes((0x90 | length,))
    if length < 0x10000:
        return b"\xdc" + length.to_bytes(2, "big")
    return b"\xdd" + length.to_bytes(4, "big")


def _pack_messages(messages: tuple[Message, ...], before: Packed) -> Packed:
    reused = len(before.messages)
    if reused and reused <= len(messages) and all(map(operator.is_, before.messages, messages[:reused])):
        if reused == len(messages):
            return before
        added = messages[reused:]
        body = before.body + b"".join(msgpack.packb(_enc_message(m), use_bin_type=True) for m in added)
        return Packed(messages, body, before.media or any(m.media is not None for m in added))
    body = b"".join(msgpack.packb(_enc_message(m), use_bin_type=True) for m in messages)
    return Packed(messages, body, any(m.media is not None for m in messages))


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]


_KEYS = {k: _pack(k) for k in ("p", "m", "sum", "sums", "pin", "ns", "seen", "u", "g", "meta", "f")}


def encode_with_memo(state: ConversationState, memo: Memo | None = None) -> tuple[bytes, Memo]:
    """:func:`encode_state`, reusing what ``memo`` (the previous encoding of this conversation) packed; returns the
    blob and the memo of this encoding. msgpack concatenates, so the payload is built from its parts byte for byte
    as one ``packb`` of the whole map would write it: a turn's encoding costs the new messages and a copy, not the
    history."""
    meta = state.meta
    msgs = _pack_messages(state.messages, memo.messages if memo else _NOTHING)
    pins = _pack_messages(state.pinned, memo.pinned if memo else _NOTHING)
    key = _KEYS
    facts = state.facts
    body = b"".join((
        b"\x8b" if facts else b"\x8a",  # a map of the 10 fields below, in this order (11 with facts)
        key["p"], _pack(state.provider),
        key["m"], _array_header(len(state.messages)), msgs.body,
        key["sum"], _pack(state.summary),
        key["sums"], _pack(state.summary_seq),
        key["pin"], _array_header(len(state.pinned)), pins.body,
        key["ns"], _pack(state.next_seq),
        key["seen"], _pack(state.seen_seq),
        key["u"], _pack(_enc_usage(state.last_usage)),
        key["g"], _pack(state.generation),
        key["meta"], _pack([meta.epoch, meta.started_at, meta.last_activity, meta.turns, meta.events,
                          meta.compactions]),
        (key["f"] + _pack([[f.key, f.text] for f in facts])) if facts else b"",
    ))
    flags = 0
    if len(body) > COMPRESS_OVER:
        body = _compress(body)
        flags |= FLAG_ZSTD
    return MAGIC + bytes([_version_for(msgs, pins, facts), flags]) + body, Memo(msgs, pins)


# A compression context costs more to set up (~10 µs) than compressing a typical state: reuse them. A pool, not a
# thread-local, since a gevent worker has a greenlet per turn and would keep a context per greenlet. Level 1, not
# zstd's default 3: a state is compressed again on every turn, and on a 47 KB history of varied text level 1 took
# 95 µs against 175 µs for a blob 0.5% larger (bench/README.md, issue 16).
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
    """Serialise ``state``. Size limits are the caller's (see :func:`worker.conversation.chat.Chat`)."""
    return encode_with_memo(state)[0]


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


def _from_payload(payload: Any) -> ConversationState:
    _need(isinstance(payload, dict), "payload is not a map")
    provider = payload.get("p")
    _need(isinstance(provider, str) and bool(provider), "no provider")
    msgs = payload.get("m", [])
    pins = payload.get("pin", [])
    _need(isinstance(msgs, list) and isinstance(pins, list), "history is not a list")
    usage_raw = payload.get("u")
    usage = None
    if usage_raw is not None:
        _need(isinstance(usage_raw, list) and len(usage_raw) == 4 and all(isinstance(x, int) for x in usage_raw),
              "bad usage")
        usage = Usage(*usage_raw)
    meta_raw = payload.get("meta", ["", 0.0, 0.0, 0, 0, 0])
    _need(isinstance(meta_raw, list) and len(meta_raw) == 6, "bad meta")
    epoch, started, last, turns, events, compactions = meta_raw
    _need(isinstance(epoch, str), "bad epoch")
    _need(all(isinstance(x, int | float) for x in (started, last)), "bad times")
    _need(all(isinstance(x, int) for x in (turns, events, compactions)), "bad counters")
    ints = {k: payload.get(k, d) for k, d in (("sums", 0), ("ns", 1), ("seen", 0), ("g", 0))}
    _need(all(isinstance(v, int) and v >= 0 for v in ints.values()), "bad counters")
    summary = payload.get("sum", "")
    _need(isinstance(summary, str), "bad summary")
    messages = tuple(_dec_message(m) for m in msgs)
    _need(all(m.seq < ints["ns"] for m in messages), "seq beyond next_seq")
    facts = _dec_facts(payload.get("f", ()))
    return ConversationState(
        provider=provider,
        messages=messages,
        summary=summary,
        summary_seq=ints["sums"],
        pinned=tuple(_dec_message(m) for m in pins),
        next_seq=ints["ns"],
        seen_seq=ints["seen"],
        last_usage=usage,
        generation=ints["g"],
        meta=Meta(epoch, float(started), float(last), turns, events, compactions),
        facts=facts,
    )


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
}


def decode_state(blob: bytes, *, provider: str | None = None, max_bytes: int = DEFAULT_MAX_STATE_BYTES) -> ConversationState:
    """Decode a state blob, or raise :class:`~worker.errors.StateDecodeError` saying why not.

    ``provider``, when given, must match the provider the state was written for.
    """
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
    body = blob[5:]
    # The decoded payload may be several times the blob; bound it so a bomb cannot exhaust memory.
    limit = max_bytes * 8
    try:
        if flags & FLAG_ZSTD:
            body = _bounded_decompress(body, limit)
        payload = msgpack.unpackb(
            body,
            raw=False,
            strict_map_key=True,
            max_str_len=limit,
            max_bin_len=limit,
            max_array_len=1_000_000,
            max_map_len=100_000,
        )
    except StateDecodeError:
        raise
    except Exception as exc:  # msgpack and zstd raise many types; all of them mean "corrupt"
        raise StateDecodeError("corrupt", f"{type(exc).__name__}: {exc}") from None
    try:
        for v in range(version, FORMAT_VERSION):
            payload = MIGRATIONS[v](payload)
        state = _from_payload(payload)
    except StateDecodeError:
        raise
    except Exception as exc:
        raise StateDecodeError("invalid", f"{type(exc).__name__}: {exc}") from None
    if provider is not None and state.provider != provider:
        raise StateDecodeError("provider", f"state belongs to {state.provider!r}, not {provider!r}")
    return state


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
    memo: Memo | None = None  # how the state was packed, when it came from a resident (nothing was decoded)
    clean: CleanPrefix | None = None  # the resident's, when it came from one


def load_state(
    blob: bytes | None, *, provider: str, max_bytes: int = DEFAULT_MAX_STATE_BYTES, now: float | None = None
) -> LoadResult:
    """Decode ``blob`` for ``provider``; never raises. ``None`` or empty bytes start a fresh conversation;
    an unusable blob also starts one, and ``problem`` says why (for quarantine and metrics)."""
    if not blob:
        return LoadResult(ConversationState.fresh(provider, now=now))
    try:
        return LoadResult(decode_state(blob, provider=provider, max_bytes=max_bytes))
    except StateDecodeError as exc:
        return LoadResult(ConversationState.fresh(provider, now=now), exc)
