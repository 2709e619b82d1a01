"""WhatsApp's customer-service window and the approved template sent outside it.

A business may send free-form messages to a player only within 24 hours of the player's last message; after that
only an approved template goes through (the API answers 131047 to anything else). Parley sends the rest of a reply
that falls outside the window as one template message (never one per part: each template is billed and a player
who gets several at once gets spam), or, with no template configured, dead-letters it before any API call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

# Meta refuses a body text parameter longer than this, or one with a newline, a tab or more than four spaces in a row.
MAX_PARAMETER_CHARS = 1024
DAY = 86_400.0

ParameterFrom = Literal["reply", "fixed", "none"]

_WHITESPACE = re.compile(r"\s+")


def template_parameter(text: str) -> str:
    """``text`` as one body parameter Meta accepts: white space runs (newlines, tabs) become one space, and a text
    over the limit is cut to it with an ellipsis."""
    flat = _WHITESPACE.sub(" ", text).strip()
    if len(flat) <= MAX_PARAMETER_CHARS:
        return flat
    return flat[:MAX_PARAMETER_CHARS - 1].rstrip() + "…"


@dataclass(frozen=True)
class Template:
    """An approved template: its ``name`` and ``language`` code as approved, and how its one body parameter is filled:
    ``reply`` (the reply's text, flattened and cut to the limit), ``fixed`` (``text``) or ``none`` (a template
    without parameters)."""

    name: str
    language: str = "en_US"
    parameter: ParameterFrom = "reply"
    text: str = ""

    def __post_init__(self) -> None:
        if self.parameter == "fixed" and not self.text.strip():
            raise ValueError("a template filled with a fixed text needs the text")

    def payload(self, reply_text: str) -> dict[str, Any]:
        """The ``template`` object of a send: name, language and the body component that fills it."""
        payload: dict[str, Any] = {"name": self.name, "language": {"code": self.language}}
        if self.parameter != "none":
            value = template_parameter(reply_text if self.parameter == "reply" else self.text)
            payload["components"] = [{"type": "body", "parameters": [{"type": "text", "text": value}]}]
        return payload


@dataclass(frozen=True)
class ServiceWindow:
    """How long after the player's last message free-form replies may go (``seconds``; 0: not checked before a send,
    the API's 131047 still is), and the template that goes instead outside it (None: dead-letter)."""

    seconds: float = DAY
    template: Template | None = None

    def is_open(self, last_inbound: float | None, now: float) -> bool:
        """Whether a free-form message may go at ``now``. Unknown (no message recorded) counts as closed: sending
        would only earn a 131047."""
        if self.seconds <= 0:
            return True
        return last_inbound is not None and now - last_inbound < self.seconds
