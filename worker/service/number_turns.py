"""What a conversation's business number gives each of its turns, with several numbers (:mod:`worker.settings.business_numbers`).

A number's ``system_prompt`` takes the place of ``PARLEY_SYSTEM_PROMPT`` in every turn of its conversations: a
player's message (where the turn's own ``system`` still wins), a game event the model answers, a timer that fires
one. A number's ``tools_file`` adds its HTTP tools to the deployment's for those same turns; a tool of the same
name as a deployment's takes its place there (the quiz line's ``hint`` is not the main line's). The conversation
names its number (:meth:`~worker.settings.business_numbers.Numbers.route`), so a turn retried on another worker after a crash gets
the same prompt and tools. This is the one place a number's prompt is decided: the ingress queues a player's message
as it came, and every turn (whatever brought it) reads the worker's numbers file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from worker.conversation.tools import Tool
from worker.settings.business_numbers import Number, Numbers


@dataclass(frozen=True)
class NumberTurns:
    """The numbers and each one's own tools (by phone number id), loaded once when the service is built."""

    numbers: Numbers
    tools: Mapping[str, tuple[Tool, ...]] = field(default_factory=dict)

    def number(self, cid: str) -> Number | None:
        """The configured number conversation ``cid`` is on (``None``: one since removed from the file)."""
        return self.numbers.get(self.numbers.route(cid)[0])

    def system_prompt(self, cid: str) -> str | None:
        """The number's own system prompt, or ``None`` (the deployment's applies)."""
        number = self.number(cid)
        return number.system_prompt if number is not None else None

    def tools_of(self, cid: str) -> tuple[Tool, ...]:
        """The number's own tools, offered beside the deployment's."""
        number = self.number(cid)
        return self.tools.get(number.phone_number_id, ()) if number is not None else ()
