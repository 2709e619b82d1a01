"""``parley scheduled CID`` (the conversation's pending timers) and ``parley cancel CID MESSAGE_ID`` (wired into
:mod:`worker.cli`)."""

from __future__ import annotations

import argparse
import re
import time
from datetime import UTC, datetime
from typing import Any

from worker.cli.terminal import for_terminal, json_for_terminal


def parse_when(value: str, *, now: float | None = None) -> datetime:
    """``--at``'s value: an RFC 3339 timestamp with an offset (as the HTTP API takes it), or ``+N`` seconds from
    now (``+300``; ``+5m`` and ``+2h`` too), which is what a person at a shell means by "in five minutes"."""
    from worker.envelopes.due_time import MAX_AHEAD_S, parse_rfc3339
    from worker.errors import InvalidScheduleError

    match = re.fullmatch(r"\+(\d+(?:\.\d+)?)([smh]?)", value.strip())
    if match is None:
        return parse_rfc3339(value)
    seconds = float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]
    if seconds > MAX_AHEAD_S:
        raise InvalidScheduleError(f"at is more than a year away: {value[:32]!r}")
    return datetime.fromtimestamp((time.time() if now is None else now) + seconds, UTC)


def add_at_option(parser: argparse.ArgumentParser) -> None:
    """The ``--at`` of ``parley send``, ``event`` and ``reset``: hold the input until then (a timer)."""
    parser.add_argument("--at", type=_when, metavar="WHEN",
                        help="hold it until WHEN: an RFC 3339 time with an offset (2026-11-25T19:30:00Z) or "
                             "+SECONDS from now (+300, +5m, +2h); list with `parley scheduled`")


def _when(value: str) -> datetime:
    from worker.errors import InvalidScheduleError

    try:
        return parse_when(value)
    except InvalidScheduleError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def pending_timers(store: Any, cid: str, *, now: float | None = None) -> list[dict[str, Any]]:
    """The conversation's held inputs, earliest first: when due (UTC), in how many seconds, kind, message id, text,
    then whether the model answers it (``respond``) and the fact it replaces (``key``): a held game event's two
    switches (False and None for anything else)."""
    from worker.envelopes.addresses import validate_conversation_id
    from worker.envelopes.inputs import decode_envelope
    from worker.errors import EnvelopeError

    now = time.time() if now is None else now
    rows = []
    for timer in store.scheduled(validate_conversation_id(cid)):
        kind: str
        respond, key = False, None
        try:
            env = decode_envelope(timer.envelope)
            kind, text, respond, key = env.kind, env.text, bool(env.respond), env.key
        except EnvelopeError:
            kind, text = "unreadable", None
        rows.append({"due": datetime.fromtimestamp(timer.due_ms / 1000, UTC).isoformat(timespec="milliseconds"),
                     "in_seconds": round(timer.due_ms / 1000 - now, 1), "kind": kind,
                     "message_id": timer.message_id, "text": text, "respond": respond, "key": key})
    return rows


def cmd_scheduled(args: argparse.Namespace) -> int:
    from worker.queue.connections import build_store
    from worker.settings import get_settings

    rows = pending_timers(build_store(get_settings()), args.conversation_id)
    if args.json:
        print(json_for_terminal(rows, indent=2))
        return 0
    if not rows:
        print(f"no pending timers for {for_terminal(args.conversation_id)}")
    for row in rows:
        text = "" if row["text"] is None else f"  {row['text']}"
        print(for_terminal(f"{row['due']}  (in {row['in_seconds']:g} s)  {row['kind']:<7}  {row['message_id']}{text}"
                           f"{_switches(row)}"))
    return 0


def _switches(row: dict[str, Any]) -> str:
    """A held event's ``respond`` and ``key``, after the line's other columns (a line without them reads as
    before, so what parses it still does)."""
    shown = [*(["respond"] if row["respond"] else []), *([f"key={row['key']}"] if row["key"] is not None else [])]
    return f"  [{', '.join(shown)}]" if shown else ""


def cmd_cancel(args: argparse.Namespace) -> int:
    from worker.client import ConversationClient

    if ConversationClient.from_env().cancel_scheduled(args.conversation_id, args.message_id):
        print(for_terminal(f"cancelled {args.message_id}"))
        return 0
    print(for_terminal(f"no pending timer {args.message_id} (never scheduled, cancelled, or already due)"))
    return 1


def add_parsers(sub: Any) -> None:
    scheduled = sub.add_parser("scheduled", help="list a conversation's pending timers (inputs sent with at=)")
    scheduled.add_argument("conversation_id")
    scheduled.add_argument("--json", action="store_true")
    scheduled.set_defaults(fn=cmd_scheduled)
    cancel = sub.add_parser("cancel", help="cancel a pending timer by its message id")
    cancel.add_argument("conversation_id")
    cancel.add_argument("message_id")
    cancel.set_defaults(fn=cmd_cancel)
