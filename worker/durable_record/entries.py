"""Durable-record entries: built by the worker, appended by the store's scripts, turned into rows by the exporter.

Pure (msgpack only): no Redis, no database. An entry is a msgpack map with ``v`` (format version), ``kind``, ``cid``
(conversation id), ``at`` (seconds since the epoch) and the kind's own fields:

=============  =====================================================================================================
``turn``       ``inputs``, ``reply``, ``steps`` (tool calls with arguments, result, duration), ``usage``, ``model``,
               ``finish``, ``model_calls``
``event_turn`` as ``turn``: a turn in which the model answered a game event (``respond``), no player message
``event``      ``inputs`` (the game event)
``reset``      ``inputs``
``notice``     ``inputs``, ``reply``, ``why`` (a fixed answer in the model's place: ``budget``, ``producer``, ...)
``compaction`` ``applied``, ``reason``, ``kept_new``, ``usage`` and ``model`` (the summariser's tokens, when it ran)
``dead``       ``inputs`` (what could be decoded), ``reason``, ``detail``, ``reply`` (the apology, if any)
``status``     ``provider_id``, ``status``, ``detail``, ``reply_id``, ``part`` (a delivery status webhook)
``sent``       ``reply_id`` (the stream entry's ``x`` field adds the provider message ids of its parts)
``failed``     ``reply_id``, ``reason`` (a reply that could not be delivered)
``delete``     nothing more: the conversation was deleted; the exporter erases it from the database
``withheld``   ``inputs`` applied while a person had taken the conversation over (no model call, no reply)
``operator``   ``input_id``, ``reply``: a person's message, sent like a reply (its rows' role is ``assistant``; the
               record's kind tells them apart, and ``parley transcript`` shows them as ``operator``)
=============  =====================================================================================================

Any commit's entry may also carry ``archived`` (the messages it took out of the verbatim history, each ``[id,
speaker, text, at]``, ``at`` in seconds or nil: the ``archived_messages`` table) and ``archive_erased`` (true: the
conversation's archive was erased before, by a reset phrase or a reset with ``forget``).

Every entry travels with a unique id the scripts give it (see :mod:`worker.store.lua`), the primary key of its row.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

from worker.conversation.model import Usage
from worker.errors import RecordError

VERSION = 1
KINDS = frozenset({"turn", "event_turn", "event", "reset", "notice", "compaction", "dead", "status", "sent", "failed",
                   "delete", "withheld", "operator"})
MAX_FIELD_CHARS = 16_000  # a tool result or argument kept in the record (the state keeps its own bound)


@dataclass(frozen=True)
class InputRecord:
    """One input a commit applied: a player's message or a game event."""

    id: str
    kind: str
    text: str = ""
    media: str | None = None  # the media type of a photo, location, ... when the message carried one
    pinned: bool = False

    def to_map(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "kind": self.kind, "text": self.text}
        if self.media:
            out["media"] = self.media
        if self.pinned:
            out["pinned"] = True
        return out


@dataclass
class Step:
    """One tool call of a turn: what the model asked for, what it got back and how long it took."""

    call_id: str
    tool: str
    arguments: str
    result: str | None = None
    ms: float | None = None
    replayed: bool = False

    def to_map(self) -> dict[str, Any]:
        out: dict[str, Any] = {"call_id": self.call_id, "tool": self.tool, "args": _clip(self.arguments),
                               "result": None if self.result is None else _clip(self.result)}
        if self.ms is not None:
            out["ms"] = round(self.ms, 1)
        if self.replayed:
            out["replayed"] = True
        return out


@dataclass
class TurnUsage:
    """Tokens a turn used over all its model rounds (the provider's figures)."""

    prompt: int = 0
    completion: int = 0
    cached: int = 0
    cache_write: int = 0
    model: str | None = None

    def add(self, usage: Usage | None, model: str | None = None) -> None:
        """Add one round trip's usage as the provider reported it (``None``: it reported none)."""
        if usage is not None:
            self.prompt += usage.prompt_tokens
            self.completion += usage.completion_tokens
            self.cached += usage.cached_tokens
            self.cache_write += usage.cache_creation_tokens
        self.model = model or self.model

    @property
    def total(self) -> int:
        return self.prompt + self.completion

    def to_map(self) -> dict[str, int]:
        return {"prompt": self.prompt, "completion": self.completion, "cached": self.cached,
                "cache_write": self.cache_write}


@dataclass
class Trail:
    """What a turn did besides its answer, collected while it runs (tool steps, usage over every round)."""

    steps: list[Step] = field(default_factory=list)
    usage: TurnUsage = field(default_factory=TurnUsage)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_FIELD_CHARS else text[:MAX_FIELD_CHARS] + "…"


def encode(kind: str, cid: str, *, at: float | None = None, **fields: Any) -> bytes:
    """One entry, ready for a script to append. Raises :class:`~worker.errors.RecordError` for an unknown kind."""
    if kind not in KINDS:
        raise RecordError(f"unknown record kind {kind!r}")
    entry = {"v": VERSION, "kind": kind, "cid": cid, "at": time.time() if at is None else at, **fields}
    return msgpack.packb(entry, use_bin_type=True)


def decode(raw: bytes) -> dict[str, Any]:
    """An entry as a map; raises :class:`~worker.errors.RecordError` when it is not one."""
    try:
        entry = msgpack.unpackb(raw, raw=False)
    except Exception as exc:  # msgpack raises several unrelated types for bad input
        raise RecordError(f"record entry does not decode: {exc}") from exc
    if not isinstance(entry, dict) or entry.get("kind") not in KINDS or not isinstance(entry.get("cid"), str):
        raise RecordError("record entry is not a record (no kind or conversation id)")
    if int(entry.get("v", 0)) > VERSION:
        raise RecordError(f"record entry of format {entry.get('v')} is newer than this exporter ({VERSION})")
    return entry


def turn(cid: str, *, inputs: Sequence[InputRecord], reply_id: str, parts: Sequence[str], trail: Trail | None,
         finish: str | None, model_calls: int, model: str | None, kind: str = "turn") -> bytes:
    """The record of a chat turn (``kind`` ``event_turn``: the model answered a game event): every input it took
    in, every part of its answer, every tool call."""
    trail = trail or Trail()
    return encode(kind, cid, inputs=[i.to_map() for i in inputs], reply={"id": reply_id, "parts": list(parts)},
                  steps=[s.to_map() for s in trail.steps], usage=trail.usage.to_map(),
                  model=trail.usage.model or model, finish=finish, model_calls=model_calls)


def applied(kind: str, cid: str, *, inputs: Sequence[InputRecord], reply_id: str | None = None,
            parts: Sequence[str] = (), **fields: Any) -> bytes:
    """The record of an input applied without the model (an event, a reset, a notice, a dead letter)."""
    extra: dict[str, Any] = dict(fields)
    if reply_id is not None:
        extra["reply"] = {"id": reply_id, "parts": list(parts)}
    return encode(kind, cid, inputs=[i.to_map() for i in inputs], **extra)


def status(cid: str, *, provider_id: str, status: str, detail: str, reply_id: str | None, part: int) -> bytes:
    return encode("status", cid, provider_id=provider_id, status=status, detail=detail, reply_id=reply_id,
                  part=part)


def sent(cid: str, reply_id: str) -> bytes:
    return encode("sent", cid, reply_id=reply_id)


def failed(cid: str, reply_id: str, reason: str) -> bytes:
    return encode("failed", cid, reply_id=reply_id, reason=reason)


def deleted(cid: str) -> bytes:
    return encode("delete", cid)


def with_archive(entry: bytes, archived: Sequence[tuple[str, str, str, float | None]], *, erased: bool) -> bytes:
    """``entry`` (a commit's) with what the commit archived (``[id, speaker, text, at]``) and whether it erased the
    archive first; the entry itself when neither."""
    if not archived and not erased:
        return entry
    extra: dict[str, Any] = {"archived": [list(a) for a in archived]} if archived else {}
    if erased:
        extra["archive_erased"] = True
    return msgpack.packb({**decode(entry), **extra}, use_bin_type=True)


# --- rows (the exporter's side) ----------------------------------------------------------------------------------

Position = tuple[int, int]
"""A stream entry's place: (ms, sequence) of its id, Redis's clock. A conversation's entries share one stream, so
this orders them whatever host built them."""


@dataclass
class Rows:
    """The rows one batch of entries becomes, for each table (see :mod:`worker.durable_record.migrations`), in stream
    order. ``unreadable`` counts entries that did not decode: they are kept whole (base64) as ``unreadable`` records
    of conversation ``""``, never lost."""

    records: list[tuple[Any, ...]] = field(default_factory=list)   # (record_id, cid, ms, seq, kind, body)
    messages: list[tuple[Any, ...]] = field(default_factory=list)  # (record_id, n, cid, ms, role, input_id,
    #                                                                 reply_id, part, text, tool, args, result, ms)
    usage: list[tuple[Any, ...]] = field(default_factory=list)     # (record_id, cid, ms, model, prompt, completion,
    #                                                                 cached, cache_write)
    deletes: list[tuple[str, str, Position]] = field(default_factory=list)  # (cid, record_id, position)
    archived: list[tuple[Any, ...]] = field(default_factory=list)  # (record_id, n, cid, id, speaker, text, at)
    erased: list[tuple[str, Position]] = field(default_factory=list)  # (cid, position): the archive erased there
    unreadable: int = 0


def to_rows(batch: Iterable[tuple[str, Position, bytes, str | None]]) -> Rows:
    """Rows for a batch of ``(record id, stream position, raw entry, provider ids)``; pure, so a replayed batch
    yields the same rows."""
    rows = Rows()
    for rid, (ms, seq), raw, extra in batch:
        try:
            entry = decode(raw)
        except RecordError as exc:
            rows.unreadable += 1
            rows.records.append((rid, "", ms, seq, "unreadable",
                                 {"raw": base64.b64encode(raw).decode(), "error": exc.args[0] if exc.args else ""}))
            continue
        cid, kind = entry["cid"], entry["kind"]
        body = {key: value for key, value in entry.items() if key not in ("v", "cid", "kind", "archived")}
        if entry.get("archive_erased"):
            rows.erased.append((cid, (ms, seq)))
        for n, (ident, speaker, text, at) in enumerate(entry.get("archived") or ()):
            rows.archived.append((rid, n, cid, ident, speaker, text, at))
        if extra:
            body["provider_ids"] = extra.split(",")
        rows.records.append((rid, cid, ms, seq, kind, body))
        if kind == "delete":
            rows.deletes.append((cid, rid, (ms, seq)))
            continue
        _messages(rows, rid, cid, ms, entry)
        usage = entry.get("usage")
        if kind in ("turn", "event_turn", "compaction") and usage:  # a compaction's summariser spends tokens too
            rows.usage.append((rid, cid, ms, entry.get("model") or "", int(usage.get("prompt") or 0),
                               int(usage.get("completion") or 0), int(usage.get("cached") or 0),
                               int(usage.get("cache_write") or 0)))
    return rows


def _messages(rows: Rows, rid: str, cid: str, ms: int, entry: Mapping[str, Any]) -> None:
    seq = 0
    for item in entry.get("inputs") or ():
        role = "player" if item.get("kind") == "message" else "event"
        rows.messages.append((rid, seq, cid, ms, role, item.get("id"), None, None, item.get("text") or "", None, None,
                              None, None))
        seq += 1
    for step in entry.get("steps") or ():
        rows.messages.append((rid, seq, cid, ms, "tool", None, None, None, "", step.get("tool"), step.get("args"),
                              step.get("result"), step.get("ms")))
        seq += 1
    reply = entry.get("reply") or {}
    for part, text in enumerate(reply.get("parts") or ()):
        rows.messages.append((rid, seq, cid, ms, "assistant", None, reply.get("id"), part, text, None, None, None,
                              None))
        seq += 1
