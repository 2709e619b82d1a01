"""A player's tap on a reply button, a list row or a template's quick-reply button -> the text the model reads
(pure: no I/O).

The id, title and description of a tap come from the player's WhatsApp client, and a modified client can send any
of them (invariant 12): the rendering is the player's message, quoted so that nothing inside a title can end the
quote or open a line of its own (``json.dumps``: quotes, newlines and control characters escaped), and the text
goes to the model in the player's role like anything else the player sends. A title that reads like a game event
stays the player's words.

==============================================  ==========================================================
``interactive`` / ``button_reply`` {id, title}  ``[tapped the button "Hint" (id "hint")]``
``interactive`` / ``list_reply``                ``[chose the list row "Theatre" (id "t1"): "Oxford St"]``
{id, title, description}
``button`` {payload, text} (template)           ``[tapped the button "Unsubscribe" (payload "STOP")]``
==============================================  ==========================================================

A part the tap lacks is left out; a tap with neither id nor title has no text (the parser ignores it as
malformed).
"""

from __future__ import annotations

import json
from typing import Any

#: Message types that are taps on something we sent: the answer threads to the tapped message.
TAP_TYPES = ("interactive", "button")

#: Interactive reply kinds a tap can be, with how the rendering names what was tapped.
_INTERACTIVE = {"button_reply": "tapped the button", "list_reply": "chose the list row"}


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) and v.strip() else None


def _quoted(v: str) -> str:
    return json.dumps(v, ensure_ascii=False)


def _render(what: str, title: str | None, key: str, ident: str | None, description: str | None) -> str | None:
    if title is None and ident is None:
        return None
    said = what + (f" {_quoted(title)}" if title is not None else "")
    if ident is not None:
        said += f" ({key} {_quoted(ident)})"
    if description is not None:
        said += f": {_quoted(description)}"
    return f"[{said}]"


def tap_text(msg: dict[str, Any]) -> str | None:
    """What the model reads for a tap in the webhook message ``msg``; ``None`` when ``msg`` is not a tap the
    player made (an interactive ``nfm_reply``, say) or carries neither id nor title."""
    kind = msg.get("type")
    if kind == "button":
        button = msg.get("button")
        if not isinstance(button, dict):
            return None
        return _render("tapped the button", _text(button.get("text")), "payload", _text(button.get("payload")), None)
    if kind != "interactive":
        return None
    interactive = msg.get("interactive")
    sub = interactive.get("type") if isinstance(interactive, dict) else None
    if not isinstance(interactive, dict) or sub not in _INTERACTIVE:
        return None
    reply = interactive.get(sub)
    if not isinstance(reply, dict):
        return None
    return _render(_INTERACTIVE[sub], _text(reply.get("title")), "id", _text(reply.get("id")),
                   _text(reply.get("description")))
