"""Reading a conversation state: bounded (size, nesting, lengths, decompressed size), never trusting a declared
length, every older format upgraded step by step (:data:`MIGRATIONS`); anything wrong is a
:class:`~worker.errors.StateDecodeError` saying why."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import msgpack
import zstandard

from worker.conversation.message_times import MAX_SECONDS, MIN_SECONDS, from_seconds
from worker.conversation.messages import ROLES, MediaRef, Message, ToolCall
from worker.conversation.model import Usage
from worker.conversation.state_encode import Memo
from worker.conversation.state_format import (
    BASE_LEN,
    DEFAULT_MAX_STATE_BYTES,
    FLAG_ZSTD,
    FOLD_VERSION,
    FORMAT_VERSION,
    LOG_VERSION,
    MAGIC,
)
from worker.conversation.state_model import ConversationState, Fact, Meta
from worker.errors import StateDecodeError


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise StateDecodeError("invalid", what)




def decode_message(fields: Any) -> Message:
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
    t = fields.get("t")
    if t is not None and (type(t) is not int or not MIN_SECONDS <= t <= MAX_SECONDS):
        raise StateDecodeError("invalid", "bad message time")
    return Message(role, content, calls, ti, name, bool(fields.get("e", False)), bool(fields.get("p", False)), seq, raw,
                   media, facts, tuple(rp), None if t is None else from_seconds(t))


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
        messages=tuple(decode_message(m) for m in msgs),
        summary=summary,
        summary_seq=ints["sums"],
        pinned=tuple(decode_message(m) for m in pins),
        next_seq=ints["ns"],
        seen_seq=ints["seen"],
        last_usage=_dec_usage(payload.get("u")),
        generation=ints["g"],
        meta=_dec_meta(payload.get("meta", ["", 0.0, 0.0, 0, 0, 0])),
        facts=_dec_facts(payload.get("f", ())),
        preamble_facts=_dec_facts(payload.get("pf", ())),
    )


def _with_frames(state: ConversationState, frames: list[Any]) -> ConversationState:
    """``state`` (a blob's base) with its appended frames applied in order (see :func:`frame`)."""
    messages = list(state.messages)
    for delta in frames:
        _need(isinstance(delta, dict), "frame is not a map")
        added = delta.get("m", [])
        _need(isinstance(added, list), "frame's messages are not a list")
        messages.extend(decode_message(m) for m in added)
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
    # Version 6 added each message's optional time ("t"): a version-5 message has none (``at`` is None).
    5: lambda payload: payload,
}


def _unpack_limits(limit: int) -> dict[str, Any]:
    return {"raw": False, "strict_map_key": True, "max_str_len": limit, "max_bin_len": limit,
            "max_array_len": 1_000_000, "max_map_len": 100_000}


def _split(blob: bytes, version: int) -> tuple[bytes, bytes]:
    """A blob's base body and its frames (none before version 4, whose body runs to the end)."""
    if version < LOG_VERSION:
        return blob[5:], b""
    if len(blob) < 5 + BASE_LEN.size:
        raise StateDecodeError("corrupt", "truncated base length")
    end = 5 + BASE_LEN.size + BASE_LEN.unpack_from(blob, 5)[0]
    if end > len(blob):
        raise StateDecodeError("corrupt", "the base runs past the blob")
    return blob[5 + BASE_LEN.size:end], blob[end:]


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
