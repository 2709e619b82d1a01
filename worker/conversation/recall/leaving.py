"""What leaves a conversation's verbatim history between two states, and those messages as the archive keeps them.

Every way a message leaves (a compaction dropping exchanges, the size-bounded encoder, an idle reset, a producer's
reset) goes from one state to the next, so one comparison of the two finds what left, whichever path it was:

- in the same epoch, a message whose ``seq`` the new history no longer holds left; so did the words of one whose
  text the new history slimmed (an old tool output compressed to a note): the archive keeps the message as it was,
  whole, and a slimmed note that leaves later is not archived again;
- across epochs (a reset), every message of the old history left except those the new one carries over (an idle
  reset keeps what the game said during the silence: they leave later, with their new positions).

Pure: the commit that lands the new state writes what this finds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from worker.conversation import messages as msgs
from worker.conversation.compaction import COMPRESSED_MARK
from worker.conversation.messages import Message
from worker.conversation.recall.archived import ArchivedMessage, Speaker, stable_id
from worker.conversation.recall.reading import TOOL_NAME
from worker.conversation.state import ConversationState


def _carried_key(m: Message) -> tuple[str, str, str | None, str | None]:
    return m.role, m.content, m.name, m.tool_call_id


def _carried_from(old: Sequence[Message], new: Sequence[Message]) -> int:
    """Where the end of ``old`` that a reset carried into ``new`` starts (``len(old)``: nothing was carried). An idle
    reset keeps the old history's end, at the new history's start or after the one note it may put first."""
    new_keys = [_carried_key(m) for m in new]
    for start in range(len(old)):
        tail = [_carried_key(m) for m in old[start:]]
        if any(new_keys[at:at + len(tail)] == tail for at in (0, 1)):
            return start
    return len(old)


def departed(before: ConversationState, after: ConversationState | None) -> tuple[Message, ...]:
    """The messages of ``before``'s history that are not verbatim in ``after``'s (``None``: the history is gone),
    oldest first, each as ``before`` held it."""
    if after is None:
        return _unslimmed(before.messages)
    if _only_grew(before, after):
        return ()
    if after.meta.epoch != before.meta.epoch:
        return _unslimmed(before.messages[:_carried_from(before.messages, after.messages)])
    now = {m.seq: m.content for m in after.messages}
    return _unslimmed(m for m in before.messages if now.get(m.seq) != m.content)


def _only_grew(before: ConversationState, after: ConversationState) -> bool:
    """The common turn, told in constant time: the history only grew. A compaction bumps the generation and a reset
    the epoch; the size bound drops exchanges from the front (the first user message stays, so the message at the
    old history's last place is then another) or rewrites every message (new objects)."""
    old, new = before.messages, after.messages
    if not old:
        return True
    return (after.meta.epoch == before.meta.epoch and after.generation == before.generation
            and len(new) >= len(old) and new[len(old) - 1] is old[-1] and new[0] is old[0])


def _unslimmed(messages: Iterable[Message]) -> tuple[Message, ...]:
    # A compressed note stands for an output archived whole when it was compressed.
    return tuple(m for m in messages if not (m.role == "tool" and m.content.startswith(COMPRESSED_MARK)))


def speaker_of(m: Message) -> Speaker:
    """Who said ``m``, as the archive names it."""
    if m.role == "user":
        return "player"
    if m.role == "tool":
        return "tool"
    if m.role == "assistant":
        return "operator" if m.name == msgs.OPERATOR else "assistant"
    return "game"  # an event, or a system message the producer gave as context


def text_of(m: Message) -> str:
    """The words the archive keeps of ``m``: its text, a tool call's name and arguments (a search of the archive
    itself left out), a photo's mark."""
    parts = [m.content] if m.content else []
    parts += [f"[called {c.name}({c.arguments})]" for c in m.tool_calls if c.name != TOOL_NAME]
    if m.media is not None and not m.content:
        parts.append("[photo]")
    return "\n".join(parts)


def archived(conversation_id: str, messages: Sequence[Message]) -> list[ArchivedMessage]:
    """``messages`` as the archive keeps them (those with no words left out), with ids that a retry computes again:
    the position is the message's ``seq``, not its epoch."""
    # What the archive's own search answered is a copy of archived messages: archiving it again would let every
    # later search find its copies, and would grow the archive by what it already holds.
    searches = {c.id for m in messages for c in m.tool_calls if c.name == TOOL_NAME}
    out: list[ArchivedMessage] = []
    for m in messages:
        if m.role == "tool" and m.tool_call_id in searches:
            continue
        text = text_of(m)
        if not text:
            continue
        speaker = speaker_of(m)
        at = getattr(m, "at", None)
        out.append(ArchivedMessage(stable_id(conversation_id, m.seq, speaker, text), speaker, text,
                                   at if isinstance(at, datetime) and at.utcoffset() is not None else None))
    return out
