"""The model's reply tools on WhatsApp: ``send_image``, ``send_location``, ``request_location``, ``send_buttons``,
``send_list`` and ``react``, their arguments the fields of the part of that type (:mod:`worker.envelopes.reply_parts`).

A call sends nothing at once: it adds its part to the turn's reply, in order with the text around it (the loop
collects the parts a tool's answer carries in ``"reply_parts"``, see :mod:`worker.conversation.facts`), so the
reply is committed with the state and delivered through the outbox like any other. Arguments over WhatsApp's
limits are an error result naming the field, which the model reads and may correct; the turn goes on.
"""

from __future__ import annotations

from typing import Any

from worker.conversation.tools import Tool
from worker.envelopes.reply_parts import (
    MAX_BUTTON_TITLE,
    MAX_BUTTONS,
    MAX_LIST_BUTTON,
    MAX_LIST_ROWS,
    MAX_ROW_DESCRIPTION,
    MAX_ROW_TITLE,
    MAX_SECTION_TITLE,
    parse_part,
    part_json,
)

_TEXT = {"type": "string", "description": "The message's body text."}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


_SCHEMAS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "send_image": ("image", "Send the player a picture (a public https link or an uploaded media id), with a caption.",
                   _object({"link": {"type": "string"}, "media_id": {"type": "string"},
                            "caption": {"type": "string"}}, [])),
    "send_location": ("location", "Send the player a map pin.",
                      _object({"latitude": {"type": "number"}, "longitude": {"type": "number"},
                               "name": {"type": "string"}, "address": {"type": "string"}},
                              ["latitude", "longitude"])),
    "request_location": ("location_request", "Ask the player to share where they are (a 'Send location' button).",
                         _object({"text": _TEXT}, ["text"])),
    "send_buttons": ("buttons", f"Send text with 1-{MAX_BUTTONS} reply buttons (titles of at most {MAX_BUTTON_TITLE} "
                                "characters); the player's tap comes back with the button's id.",
                     _object({"text": _TEXT, "buttons": {"type": "array", "items": _object(
                         {"id": {"type": "string"}, "title": {"type": "string"}}, ["id", "title"])}},
                         ["text", "buttons"])),
    "send_list": ("list", f"Send text with a button (its label: `button`) opening a list of at most {MAX_LIST_ROWS} "
                          f"rows in all (titles of {MAX_ROW_TITLE} characters, descriptions of {MAX_ROW_DESCRIPTION}, "
                          f"section titles of {MAX_SECTION_TITLE}, the label of {MAX_LIST_BUTTON}).",
                  _object({"text": _TEXT, "button": {"type": "string"}, "sections": {"type": "array", "items": _object(
                      {"title": {"type": "string"}, "rows": {"type": "array", "items": _object(
                          {"id": {"type": "string"}, "title": {"type": "string"},
                           "description": {"type": "string"}}, ["id", "title"])}}, ["rows"])}},
                      ["text", "button", "sections"])),
    "react": ("reaction", "React to the player's message with an emoji.", _object({"emoji": {"type": "string"}},
                                                                                   ["emoji"])),
}


def _handler(kind: str) -> Any:
    def add(**arguments: Any) -> dict[str, Any]:
        part = parse_part({"type": kind, **arguments}, kind)  # InvalidReplyPartError: the model reads which field
        return {"reply_parts": [part_json(part)],
                "result": f"Added to your reply ({kind}); it is sent with your reply, in order."}
    return add


def reply_tools() -> list[Tool]:
    """The reply tools, in a fixed order."""
    return [Tool(name, description, schema, _handler(kind)) for name, (kind, description, schema) in _SCHEMAS.items()]
