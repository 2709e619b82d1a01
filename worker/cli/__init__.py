"""``parley``: the command line for people.

    parley demo [--interactive]            run a worker and a game session you can watch (zero setup)
    parley send CID TEXT [--id ID] [--at WHEN]   queue a chat turn (--at: held until then, a timer)
    parley event CID TEXT [--pinned] [--key K] [--respond] [--at WHEN]   queue a game event
    parley reset CID [--at WHEN] | parley delete CID
    parley show CID                        decoded state, mailbox and outbox depth, last replies, the latest
                                           delivery status of each recent message
    parley trace CID [-n N]                the conversation's trace
    parley dead [CID] | parley replay CID INDEX
    parley health                          exit 0 when Redis and the broker answer (container probe)
    parley inlet                           queue the messages a game engine publishes to PARLEY_INLET_STREAM
    parley inlet --dead | --replay DEAD_ID the stream's dead letters; put one back (not a deleted conversation's)
    parley config [--readme PATH]          every setting, its variable and default (a Markdown table), or
                                           refresh that table in the page at PATH
                                           (docs/configuration.md)
    parley db upgrade | parley db version  the durable record's schema in PostgreSQL (PARLEY_DATABASE_URL)
    parley exporter [--once]               copy the record streams to PostgreSQL
    parley transcript CID [--json]         the whole conversation from PostgreSQL
    parley usage [--since DAY] [--conversation CID]   tokens per conversation and UTC day
    parley scheduled CID [--json]          the conversation's pending timers (inputs sent with at=), earliest first
    parley cancel CID MESSAGE_ID           cancel a pending timer
    parley pause CID [--seconds N]         a person takes the conversation over (no model call, no reply)
    parley resume CID                      hand it back to the model
    parley say CID TEXT [--id ID]          send the player a person's message, in order with the replies
    parley optout CID | parley optin CID   opt the player out of (or back in to) business-initiated messages
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import msgpack

from worker.cli.terminal import for_terminal, json_for_terminal
from worker.settings import get_settings


def _client() -> Any:
    from worker.client import ConversationClient

    return ConversationClient.from_env()


def _store() -> Any:
    from worker.queue.connections import build_store

    return build_store(get_settings())


def _print(obj: Any) -> None:
    # Players' and models' text is in it (show, trace): controls escaped so it cannot drive the terminal.
    from worker.client.summary import plain

    print(json_for_terminal(obj, indent=2, default=plain))


def _cmd_send(args: argparse.Namespace) -> int:
    accepted = _client().send_message(args.conversation_id, args.text, message_id=args.id, system=args.system,
                                      at=args.at)
    _print(accepted.__dict__)
    return 0


def _cmd_event(args: argparse.Namespace) -> int:
    accepted = _client().send_event(args.conversation_id, args.text, message_id=args.id, pinned=args.pinned,
                                    key=args.key, respond=args.respond, at=args.at)
    _print(accepted.__dict__)
    return 0


def _cmd_reset(args: argparse.Namespace) -> int:
    _print(_client().reset(args.conversation_id, at=args.at, forget=args.forget).__dict__)
    return 0


def _cmd_delete(args: argparse.Namespace) -> int:
    from worker.cli.record import erase_everywhere

    _client().delete(args.conversation_id)
    erased = erase_everywhere(args.conversation_id)
    erased_too = f" (and {erased} records in the database)" if erased is not None else ""
    print(f"deleted {args.conversation_id}{erased_too}")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from worker.client.summary import summary

    _print(summary(_store(), args.conversation_id))
    return 0


def _cmd_trace(args: argparse.Namespace) -> int:
    from worker.client.summary import with_texts

    store = _store()
    entries = [msgpack.unpackb(entry, raw=False) for entry in store.trace(args.conversation_id, args.n)]
    for entry in with_texts(entries, store.read_state(args.conversation_id).blob):
        _print(entry)
    return 0


def _cmd_dead(args: argparse.Namespace) -> int:
    from worker.envelopes.inputs import decode_dead_letter

    store = _store()
    cids = [args.conversation_id] if args.conversation_id else store.dead_index()
    for cid in cids:
        for index, raw in enumerate(store.dead_letters(cid)):
            letter = decode_dead_letter(raw)
            print(for_terminal(f"{cid} [{index}] {letter.what} {letter.id}: {letter.reason} — {letter.detail} "
                               f"(attempts {letter.attempts})"))
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from worker.envelopes.inputs import decode_dead_letter

    store = _store()
    letters = store.dead_letters(args.conversation_id)
    if not 0 <= args.index < len(letters):
        print(f"error: {args.conversation_id} has no dead letter {args.index}", file=sys.stderr)
        return 2
    letter = decode_dead_letter(letters[args.index])
    if not letter.payload:
        print(f"error: dead letter {args.index} kept no payload to replay", file=sys.stderr)
        return 2
    target = "inbox" if letter.what == "input" else "outbox"
    if not store.replay_dead(args.conversation_id, args.index, target=target, entry_id=letter.id,
                             payload=letter.payload):
        print("error: the dead letters changed meanwhile; list them again", file=sys.stderr)
        return 2
    from worker.queue.wakeup import DELIVER, DRAIN, celery_waker

    celery_waker(get_settings(), DRAIN if target == "inbox" else DELIVER)(args.conversation_id)
    print(for_terminal(f"replayed {letter.what} {letter.id} of {args.conversation_id} ({letter.reason})"))
    return 0


def _cmd_health(args: argparse.Namespace) -> int:
    from worker.queue.broker import check_broker

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
            shown = "" if default is None else f"`{json.dumps(default, ensure_ascii=False) if not isinstance(default, str) else default}`"
            rows.append(f"| `{env_name(flat, field)}` | {shown} | {(field.description or '').replace('|', '/')} |")
    return "\n".join(rows)


_TABLE_START = "<!-- config:start (generated by `parley config --readme`; do not edit by hand) -->"
_TABLE_END = "<!-- config:end -->"


def page_with_table(text: str) -> str:
    """``text`` (docs/configuration.md, or any page with the markers) with its configuration block replaced by the
    table generated from the settings."""
    start, end = text.index(_TABLE_START), text.index(_TABLE_END)
    return text[: start + len(_TABLE_START)] + "\n" + _settings_table() + "\n" + text[end:]


def _cmd_config(args: argparse.Namespace) -> int:
    if args.readme:
        from pathlib import Path

        path = Path(args.readme)
        path.write_text(page_with_table(path.read_text()))
        print(f"updated the configuration table in {path}")
        return 0
    print(_settings_table())
    return 0


def _cmd_inlet(args: argparse.Namespace) -> int:
    from worker.inlet import run_inlet

    if args.dead or args.replay:
        return _inlet_dead(args.replay)
    return run_inlet(get_settings(), once=args.once)


def _inlet_dead(replay_id: str | None) -> int:
    """List the stream inlet's dead letters, or replay one (refused for a conversation deleted after it)."""
    import redis

    from worker.errors import ReplayRefusedError
    from worker.inlet.dead_letters import dead_letters, replay

    settings = get_settings()
    store, stream = _store(), settings.producers.inlet_stream
    r = redis.Redis.from_url(settings.redis.url or "redis://localhost:6379/0")  # the stream's Redis, as the inlet's
    if replay_id is None:
        for letter in dead_letters(r, stream):
            print(for_terminal(f"{letter.id} (entry {letter.entry_id}, {letter.conversation_id or '?'}): "
                               f"{letter.reason}"))
        return 0
    try:
        new_id = replay(r, stream, replay_id, store)
    except ReplayRefusedError as exc:
        print(for_terminal(f"error: {exc}"), file=sys.stderr)
        return 2
    print(f"replayed dead letter {replay_id} as entry {new_id} of {stream}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from worker.cli.demo import run_demo

    return run_demo(interactive=args.interactive, turns=args.turns)


def _add_input_parsers(sub: Any) -> None:
    """``parley send``, ``event`` and ``reset``: what producers do, by hand."""
    from worker.cli import scheduled

    send = sub.add_parser("send", help="queue a chat turn, as if the player wrote it")
    send.add_argument("conversation_id")
    send.add_argument("text")
    send.add_argument("--id", help="the message id (a resubmitted id is ignored); default: a fresh one")
    send.add_argument("--system", help="this turn's system prompt instead of the configured one")
    scheduled.add_at_option(send)
    send.set_defaults(fn=_cmd_send)
    event = sub.add_parser("event", help="queue a game event")
    event.add_argument("conversation_id")
    event.add_argument("text")
    event.add_argument("--id", help="the message id (a resubmitted id is ignored); default: a fresh one")
    event.add_argument("--pinned", action="store_true", help="the event survives every compaction")
    event.add_argument("--key", help="the text is the conversation's fact of this key (replaces the one before)")
    event.add_argument("--respond", action="store_true", help="the model answers the event")
    scheduled.add_at_option(event)
    event.set_defaults(fn=_cmd_event)
    reset = sub.add_parser("reset", help="queue a reset: the conversation starts fresh after the inputs before it "
                                         "(its history goes to the archive the model can search)")
    reset.add_argument("conversation_id")
    reset.add_argument("--forget", action="store_true", help="erase the archive too: nothing of before is kept")
    scheduled.add_at_option(reset)
    reset.set_defaults(fn=_cmd_reset)


def _build_parser() -> argparse.ArgumentParser:
    from worker.cli import scheduled

    parser = argparse.ArgumentParser(prog="parley", description="Parley: a worker for stateful LLM conversations.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a worker and a scripted game session (or --interactive chat)")
    demo.add_argument("--interactive", action="store_true")
    demo.add_argument("--turns", type=int, default=None, help="stop the scripted session after N inputs")
    demo.set_defaults(fn=_cmd_demo)
    _add_input_parsers(sub)
    for name, fn, text in (("delete", _cmd_delete, "delete the conversation now, everywhere (its record too)"),
                           ("show", _cmd_show, "the decoded state, mailbox and outbox, the last replies")):
        command = sub.add_parser(name, help=text)
        command.add_argument("conversation_id")
        command.set_defaults(fn=fn)
    trace = sub.add_parser("trace", help="the conversation's trace: each input, turn and reply")
    trace.add_argument("conversation_id")
    trace.add_argument("-n", type=int, default=50)
    trace.set_defaults(fn=_cmd_trace)
    dead = sub.add_parser("dead", help="list dead letters with their reasons")
    dead.add_argument("conversation_id", nargs="?")
    dead.set_defaults(fn=_cmd_dead)
    replay = sub.add_parser("replay", help="put a dead-lettered input back at the end of the mailbox")
    replay.add_argument("conversation_id")
    replay.add_argument("index", type=int)
    replay.set_defaults(fn=_cmd_replay)
    sub.add_parser("health", help="exit 0 when Redis and the broker answer (a container probe)").set_defaults(fn=_cmd_health)
    inlet = sub.add_parser("inlet", help="queue the messages of PARLEY_INLET_STREAM (the Procfile's inlet process)")
    inlet.add_argument("--once", action="store_true", help="one round of the stream, then exit")
    inlet.add_argument("--dead", action="store_true", help="list the stream's dead letters (<stream>:dead)")
    inlet.add_argument("--replay", metavar="DEAD_ID", help="put a dead letter back on the stream (refused when its "
                       "conversation was deleted after it)")
    inlet.set_defaults(fn=_cmd_inlet)
    config = sub.add_parser("config",
                            help="print every setting (or --readme docs/configuration.md to refresh its table)")
    config.add_argument("--readme", metavar="PATH")
    config.set_defaults(fn=_cmd_config)
    from worker.cli.record import add_parsers

    add_parsers(sub)
    scheduled.add_parsers(sub)
    from worker.cli import handoff

    handoff.add_parsers(sub)
    from worker.cli import pseudonym

    pseudonym.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from worker.observability.logs import configure_logging

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

