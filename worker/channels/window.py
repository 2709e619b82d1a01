"""WhatsApp's customer-service window and the approved template sent outside it.

A business may send free-form messages to a player only within 24 hours of the player's last message; after that
only an approved template goes through (the API answers 131047 to anything else). Parley sends the rest of a reply
that falls outside the window as one template message (never one per part: each template is billed and a player
who gets several at once gets spam), or, with no template configured, dead-letters it before any API call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

# Meta refuses a body text parameter longer than this, or one with a newline, a tab or more than four spaces in a row.
MAX_PARAMETER_CHARS = 1024
#: A template carries at most this many quick-reply buttons (Meta's template components reference).
MAX_QUICK_REPLIES = 10
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
    without parameters).

    A template approved with more components gets them too (each empty by default, so a template configured before
    them sends as it did): ``header_image``, the link of its header's image; ``more_parameters``, fixed texts for the
    body parameters after the first; ``quick_replies``, the payload of each of its quick-reply buttons, in order (the
    payload comes back when the player taps it)."""

    name: str
    language: str = "en_US"
    parameter: ParameterFrom = "reply"
    text: str = ""
    header_image: str | None = None
    more_parameters: tuple[str, ...] = field(default=())
    quick_replies: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.parameter == "fixed" and not self.text.strip():
            raise ValueError("a template filled with a fixed text needs the text")
        if len(self.quick_replies) > MAX_QUICK_REPLIES:
            raise ValueError(f"a template has at most {MAX_QUICK_REPLIES} quick-reply buttons")

    def payload(self, reply_text: str) -> dict[str, Any]:
        """The ``template`` object of a send: name, language and the components that fill it (header, body,
        buttons, as Meta's template-messages reference shows them)."""
        payload: dict[str, Any] = {"name": self.name, "language": {"code": self.language}}
        components: list[dict[str, Any]] = []
        if self.header_image:
            components.append({"type": "header", "parameters": [{"type": "image",
                                                                  "image": {"link": self.header_image}}]})
        values = [] if self.parameter == "none" else [reply_text if self.parameter == "reply" else self.text]
        values += self.more_parameters
        if values:
            components.append({"type": "body", "parameters": [{"type": "text", "text": template_parameter(v)}
                                                              for v in values]})
        components += [{"type": "button", "sub_type": "quick_reply", "index": str(i),
                        "parameters": [{"type": "payload", "payload": p}]} for i, p in enumerate(self.quick_replies)]
        if components:
            payload["components"] = components
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
