"""``parley pseudonym CONVERSATION_ID``: the pseudonym traces and span-linked log lines show for a conversation, so an
operator can find a player's traces (see :mod:`worker.observability.tracing.pseudonyms`)."""

from __future__ import annotations

import argparse
from typing import Any

from worker.settings import get_settings


def _cmd_pseudonym(args: argparse.Namespace) -> int:
    from worker.envelopes.addresses import validate_conversation_id
    from worker.observability.tracing.pseudonyms import pseudonym
    from worker.queue.connections import redis_client
    from worker.store.trace_ids import fleet_trace_key

    settings = get_settings()
    validate_conversation_id(args.conversation_id)
    given = settings.observability.trace_id_key
    # The fleet's key itself, never a stand-in: a pseudonym made with another key would find no trace.
    key = given.get_secret_value().encode() if given is not None else \
        fleet_trace_key(redis_client(settings), settings.redis.key_prefix)
    print(pseudonym(args.conversation_id, key))
    return 0


def add_parser(sub: Any) -> None:
    """``parley pseudonym``, on ``parley``'s sub-command parser ``sub``."""
    command = sub.add_parser("pseudonym", help="the pseudonym traces show for a conversation id (PARLEY_TRACE_ID_KEY, "
                                               "else the key kept in Redis)")
    command.add_argument("conversation_id")
    command.set_defaults(fn=_cmd_pseudonym)
