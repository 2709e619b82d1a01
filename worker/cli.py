"""``parley``: the command line for people.

    parley demo [--interactive]            run a worker and a game session you can watch (zero setup)
    parley send CID TEXT [--id ID]         queue a chat turn
    parley event CID TEXT [--pinned]       queue a game event
    parley reset CID | parley delete CID
    parley show CID                        decoded state, mailbox and outbox depth, last replies, the latest
                                           delivery status of each recent message
    parley trace CID [-n N]                the conversation's trace
    parley dead [CID] | parley replay CID INDEX
    parley health                          exit 0 when Redis and the broker answer (container probe)
    parley config [--readme PATH]          every setting, its variable and default (a Markdown table), or
                                           refresh that table in the page at PATH
                                           (docs/configuration.md)
    parley db upgrade | parley db version  the durable record's schema in PostgreSQL (PARLEY_DATABASE_URL)
    parley exporter [--once]               copy the record streams to PostgreSQL
    parley transcript CID [--json]         the whole conversation from PostgreSQL
    parley usage [--since DAY] [--conversation CID]   tokens per conversation and UTC day
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import msgpack

from worker.settings import get_settings
from worker.terminal import for_terminal, json_for_terminal


def _client() -> Any:
    from worker.client import ConversationClient

    return ConversationClient.from_env()


def _store() -> Any:
    from worker.runtime import build_store

    return build_store(get_settings())


def _print(obj: Any) -> None:
    # Players' and models' text is in it (show, trace): controls escaped so it cannot drive the terminal.
    print(json_for_terminal(obj, indent=2, default=_default))


def _default(o: Any) -> Any:
    if isinstance(o, bytes):
        try:
            return msgpack.unpackb(o, raw=False)
        except Exception:
            return o.hex()
    return str(o)


def _cmd_send(a: argparse.Namespace) -> int:
    r = _client().send_message(a.conversation_id, a.text, message_id=a.id, system=a.system)
    _print(r.__dict__)
    return 0


def _cmd_event(a: argparse.Namespace) -> int:
    r = _client().send_event(a.conversation_id, a.text, message_id=a.id, pinned=a.pinned)
    _print(r.__dict__)
    return 0


def _cmd_reset(a: argparse.Namespace) -> int:
    _print(_client().reset(a.conversation_id).__dict__)
    return 0


def _cmd_delete(a: argparse.Namespace) -> int:
    from worker.record.commands import erase_everywhere

    _client().delete(a.conversation_id)
    erased = erase_everywhere(a.conversation_id)
    print(f"deleted {a.conversation_id}" + (f" (and {erased} records in the database)" if erased is not None else ""))
    return 0


def _cmd_show(a: argparse.Namespace) -> int:
    from worker.conversation.inspect import inspect_state

    store = _store()
    snap = store.read_state(a.conversation_id)
    trace = [msgpack.unpackb(t, raw=False) for t in store.trace(a.conversation_id, 50)]
    statuses = store.statuses(a.conversation_id, 50)
    latest = {s.provider_id: s.status for s in statuses}
    view = {"conversation_id": a.conversation_id, "version": snap.version,
            "mailbox_depth": store.inbox_depth(a.conversation_id),
            "outbox_depth": store.outbox_depth(a.conversation_id),
            "dead_letters": len(store.dead_letters(a.conversation_id)),
            "quarantined_states": len(store.quarantined(a.conversation_id)),
            "tokens_today": store.tokens_today(a.conversation_id),  # what PARLEY_DAILY_TOKEN_BUDGET is checked against
            "last_replies": [{"id": t.get("id"), "reply": t.get("reply"), "prompt_tokens": t.get("prompt_tokens")}
                             for t in trace if t.get("reply")][-5:],
            "delivered": [{"id": rid, "provider_ids": ids, "statuses": [latest.get(i) for i in ids]}
                          for rid, ids in store.delivered(a.conversation_id)][-5:],
            # The latest status of each recent message (forward only: a late `delivered` never hides a `read`).
            "statuses": [{"provider_id": s.provider_id, "status": s.status, "at_ms": s.at_ms,
                          **({"detail": s.detail} if s.detail else {})} for s in statuses[-10:]],
            "state": inspect_state(snap.blob)}
    _print(view)
    return 0


def _cmd_trace(a: argparse.Namespace) -> int:
    for entry in _store().trace(a.conversation_id, a.n):
        _print(msgpack.unpackb(entry, raw=False))
    return 0


def _cmd_dead(a: argparse.Namespace) -> int:
    from worker.envelopes import decode_dead_letter

    store = _store()
    cids = [a.conversation_id] if a.conversation_id else store.dead_index()
    for cid in cids:
        for i, raw in enumerate(store.dead_letters(cid)):
            d = decode_dead_letter(raw)
            print(for_terminal(f"{cid} [{i}] {d.what} {d.id}: {d.reason} — {d.detail} (attempts {d.attempts})"))
    return 0


def _cmd_replay(a: argparse.Namespace) -> int:
    from worker.envelopes import decode_dead_letter

    store = _store()
    letters = store.dead_letters(a.conversation_id)
    if not 0 <= a.index < len(letters):
        print(f"error: {a.conversation_id} has no dead letter {a.index}", file=sys.stderr)
        return 2
    d = decode_dead_letter(letters[a.index])
    if not d.payload:
        print(f"error: dead letter {a.index} kept no payload to replay", file=sys.stderr)
        return 2
    target = "inbox" if d.what == "input" else "outbox"
    if not store.replay_dead(a.conversation_id, a.index, target=target, entry_id=d.id, payload=d.payload):
        print("error: the dead letters changed meanwhile; list them again", file=sys.stderr)
        return 2
    from worker.wakeup import DELIVER, DRAIN, celery_waker

    celery_waker(get_settings(), DRAIN if target == "inbox" else DELIVER)(a.conversation_id)
    print(for_terminal(f"replayed {d.what} {d.id} of {a.conversation_id} ({d.reason})"))
    return 0


def _cmd_health(a: argparse.Namespace) -> int:
    from worker.broker import check_broker

    try:
        _store().ping()
        check_broker(get_settings())
    except Exception as exc:
        print(for_terminal(f"unhealthy: {exc}"), file=sys.stderr)
        return 1
    print("ok")
    return 0


def _settings_table() -> str:
    """The configuration table, generated from the settings' groups (docs/configuration.md's table comes from here)."""
    from worker.settings import GROUPS, env_name, knobs

    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for group in GROUPS.values():
        rows.append(f"| **{group.heading}** | | |")
        for flat, (_, field) in knobs(group).items():
            default = field.default if field.default_factory is None else field.default_factory()  # type: ignore[call-arg]
            shown = "" if default is None else f"`{json.dumps(default) if not isinstance(default, str) else default}`"
            rows.append(f"| `{env_name(flat, field)}` | {shown} | {(field.description or '').replace('|', '/')} |")
    return "\n".join(rows)


_README_START = "<!-- config:start (generated by `parley config --readme`; do not edit by hand) -->"
_README_END = "<!-- config:end -->"


def readme_with_table(text: str) -> str:
    """``text`` (docs/configuration.md, or any page with the markers) with its configuration block replaced by the table generated from the settings."""
    start, end = text.index(_README_START), text.index(_README_END)
    return text[: start + len(_README_START)] + "\n" + _settings_table() + "\n" + text[end:]


def _cmd_config(a: argparse.Namespace) -> int:
    if a.readme:
        from pathlib import Path

        path = Path(a.readme)
        path.write_text(readme_with_table(path.read_text()))
        print(f"updated the configuration table in {path}")
        return 0
    print(_settings_table())
    return 0


def _cmd_demo(a: argparse.Namespace) -> int:
    from worker.demo import run_demo

    return run_demo(interactive=a.interactive, turns=a.turns)


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="parley", description="Parley: a worker for stateful LLM conversations.")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="run a worker and a scripted game session (or --interactive chat)")
    d.add_argument("--interactive", action="store_true")
    d.add_argument("--turns", type=int, default=None, help="stop the scripted session after N inputs")
    d.set_defaults(fn=_cmd_demo)
    s = sub.add_parser("send", help="queue a chat turn")
    s.add_argument("conversation_id")
    s.add_argument("text")
    s.add_argument("--id")
    s.add_argument("--system")
    s.set_defaults(fn=_cmd_send)
    e = sub.add_parser("event", help="queue a game event")
    e.add_argument("conversation_id")
    e.add_argument("text")
    e.add_argument("--id")
    e.add_argument("--pinned", action="store_true")
    e.set_defaults(fn=_cmd_event)
    for name, fn in (("reset", _cmd_reset), ("delete", _cmd_delete), ("show", _cmd_show)):
        x = sub.add_parser(name)
        x.add_argument("conversation_id")
        x.set_defaults(fn=fn)
    t = sub.add_parser("trace")
    t.add_argument("conversation_id")
    t.add_argument("-n", type=int, default=50)
    t.set_defaults(fn=_cmd_trace)
    dl = sub.add_parser("dead", help="list dead letters with their reasons")
    dl.add_argument("conversation_id", nargs="?")
    dl.set_defaults(fn=_cmd_dead)
    r = sub.add_parser("replay", help="put a dead-lettered input back at the end of the mailbox")
    r.add_argument("conversation_id")
    r.add_argument("index", type=int)
    r.set_defaults(fn=_cmd_replay)
    sub.add_parser("health").set_defaults(fn=_cmd_health)
    c = sub.add_parser("config", help="print every setting (or --readme docs/configuration.md to refresh its table)")
    c.add_argument("--readme", metavar="PATH")
    c.set_defaults(fn=_cmd_config)
    from worker.record.commands import add_parsers

    add_parsers(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    from worker.logs import configure_logging

    configure_logging(get_settings())
    args = _build_parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except Exception as exc:
        from worker.errors import ParleyError

        if isinstance(exc, ParleyError):
            print(for_terminal(f"error: {exc}"), file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
