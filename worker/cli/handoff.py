"""``parley pause``, ``parley resume`` and ``parley say``: a person takes a conversation over from the command line
(the same calls as ``ConversationClient.pause``, ``resume`` and ``send_operator_message``); ``parley optout`` and
``parley optin``: a player's opt-out, as their STOP and START make it (``ConversationClient.opt_out``)."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any


def _client() -> Any:
    from worker.client import ConversationClient

    return ConversationClient.from_env()


def _when(until: float | None) -> str:
    if until is None:
        return "until resumed"
    return "until " + dt.datetime.fromtimestamp(until, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _cmd_pause(args: argparse.Namespace) -> int:
    pause = _client().pause(args.conversation_id, seconds=args.seconds)
    print(f"paused {args.conversation_id} {_when(pause.until)}")
    return 0


def _cmd_resume(args: argparse.Namespace) -> int:
    was = _client().resume(args.conversation_id)
    print(f"resumed {args.conversation_id}" if was else f"{args.conversation_id} was not paused")
    return 0


def _cmd_say(args: argparse.Namespace) -> int:
    from worker.cli.terminal import for_terminal

    done = _client().send_operator_message(args.conversation_id, args.text, message_id=args.id)
    print(for_terminal(f"queued {done.message_id} for {args.conversation_id}"
                       + (" (a duplicate: nothing new queued)" if done.duplicate else "")))
    return 0


def _cmd_optout(args: argparse.Namespace) -> int:
    changed = _client().opt_out(args.conversation_id)
    print(f"opted {args.conversation_id} out" if changed else f"{args.conversation_id} was opted out already")
    return 0


def _cmd_optin(args: argparse.Namespace) -> int:
    changed = _client().opt_out(args.conversation_id, opted_out=False)
    print(f"opted {args.conversation_id} in" if changed else f"{args.conversation_id} was not opted out")
    return 0


def add_parsers(sub: Any) -> None:
    """The handoff commands, on ``parley``'s sub-command parser ``sub``."""
    pause = sub.add_parser("pause", help="a person takes the conversation over: no model call, no reply, until "
                                         "resumed (or for --seconds)")
    pause.add_argument("conversation_id")
    pause.add_argument("--seconds", type=float, help="end the pause by itself after this many seconds")
    pause.set_defaults(fn=_cmd_pause)
    resume = sub.add_parser("resume", help="hand the conversation back to the model")
    resume.add_argument("conversation_id")
    resume.set_defaults(fn=_cmd_resume)
    say = sub.add_parser("say", help="send the player a person's message, in order with the replies")
    say.add_argument("conversation_id")
    say.add_argument("text")
    say.add_argument("--id", help="the message's id: sending it again with the same id sends nothing new")
    say.set_defaults(fn=_cmd_say)
    optout = sub.add_parser("optout", help="opt the player out: nothing business-initiated is sent to them (an "
                                           "answered event, a timer, a template, an operator's message)")
    optout.add_argument("conversation_id")
    optout.set_defaults(fn=_cmd_optout)
    optin = sub.add_parser("optin", help="opt the player back in")
    optin.add_argument("conversation_id")
    optin.set_defaults(fn=_cmd_optin)
