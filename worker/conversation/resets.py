"""When a conversation starts over: after the player's long silence (the idle gap) or on a reset phrase. Only the
player's turns move the idle clock; what the game said during the silence, its keyed facts and its pinned items are
kept for the player to come back to (a reset phrase keeps nothing)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from worker.conversation import messages as msgs
from worker.conversation.messages import Message
from worker.conversation.state import ConversationState

_PUNCT = re.compile(r"[^\w\s]+")


def normalise(text: str) -> str:
    """A phrase as it is compared: case and punctuation ignored."""
    return " ".join(_PUNCT.sub(" ", text.casefold()).split())


def reset_phrase_at(messages: Sequence[Message], phrases: set[str]) -> int | None:
    """The index of the last of ``messages`` that is a reset phrase (the player's text, not a photo's caption,
    equal to one of ``phrases`` once normalised), or ``None``. A turn that takes in several messages (a burst:
    "start over", then "hi") starts over there: what came before it goes with the old conversation, what came
    after it is the new one's first words."""
    if not phrases:
        return None
    return max((i for i, m in enumerate(messages)
                if m.role == "user" and m.media is None and normalise(m.content) in phrases), default=None)


def is_idle(st: ConversationState, now: float, gap: float | None) -> bool:
    """The player has been silent longer than ``gap``: only their turns move the clock (a steady stream of game
    events must not keep an abandoned conversation alive), and a player who never spoke has nothing to reset."""
    last = st.meta.last_activity
    return gap is not None and st.meta.turns > 0 and bool(last) and now - last > gap


def silence_starts(messages: Sequence[Message]) -> int:
    """Where what was said after the player's last exchange (their last message and the model's answer to it)
    starts: the game's events, the model's answers to the events it answered, a person's messages."""
    last = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    since = last + 1
    while since < len(messages) and messages[since].role in ("assistant", "tool") and \
            messages[since].name != msgs.OPERATOR:
        since += 1  # the model's answer to the player's last message: part of the old conversation
    return since


def fresh_after_idle(st: ConversationState, provider: str, now: float) -> ConversationState:
    """A new conversation that keeps what was said after the player's last exchange, the keyed facts and the pinned
    items: what the game told the model during the silence (its events, the answers to the events the model
    answered, a person's messages: what the player may be answering), the game's current facts (the target) and
    what it pinned ("joined team Owls": pinned because it stays true) are the context the player comes back to.
    Pinned messages of the history left behind move to the pinned items, as a compaction that drops their exchange
    moves them; only an explicit reset (the player's phrase, the producer's reset) clears them."""
    since = silence_starts(st.messages)
    pinned = (*st.pinned, *(m for m in st.messages[:since] if m.pinned))
    fresh = replace(ConversationState.fresh(provider, now=now), facts=st.facts, preamble_facts=st.facts,
                    pinned=pinned)
    kept = msgs.opening(st.messages[since:])  # one that starts with a person's words gets the game's note first
    return fresh.append(*kept) if kept else fresh
