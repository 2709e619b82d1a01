"""The Cloud API message object of each rich reply part (:mod:`worker.envelopes.reply_parts`): the ``type`` and its object,
as documented for ``POST /{phone_number_id}/messages`` (the addressing, the context and the callback data are the
sender's). Shapes: image ``{"type": "image", "image": {"link" | "id", "caption"}}``; location ``{"type": "location",
"location": {"latitude", "longitude", "name", "address"}}``; interactive ``{"type": "interactive", "interactive":
{"type": "button" | "list" | "location_request_message", "body": {"text"}, "action": ...}}``; reaction ``{"type":
"reaction", "reaction": {"message_id", "emoji"}}``.
"""

from __future__ import annotations

from typing import Any

from worker.envelopes.reply_parts import (
    ButtonsPart,
    ImagePart,
    ListPart,
    LocationPart,
    LocationRequestPart,
    ReactionPart,
    RichPart,
)


def _interactive(kind: str, text: str, action: dict[str, Any]) -> dict[str, Any]:
    return {"type": "interactive", "interactive": {"type": kind, "body": {"text": text}, "action": action}}


def _some(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def message(part: RichPart, reacts_to: str | None) -> dict[str, Any]:
    """The message object that sends ``part``. A reaction needs the player's message (``reacts_to``); without one it
    goes as its emoji in a text message (a reaction to nothing would be refused)."""
    if isinstance(part, ImagePart):
        return {"type": "image", "image": _some(link=part.link, id=part.media_id, caption=part.caption)}
    if isinstance(part, LocationPart):
        return {"type": "location", "location": _some(latitude=part.latitude, longitude=part.longitude,
                                                      name=part.name, address=part.address)}
    if isinstance(part, LocationRequestPart):
        return _interactive("location_request_message", part.text, {"name": "send_location"})
    if isinstance(part, ButtonsPart):
        return _interactive("button", part.text, {"buttons": [
            {"type": "reply", "reply": {"id": b.id, "title": b.title}} for b in part.buttons]})
    if isinstance(part, ListPart):
        sections = [_some(title=s.title, rows=[_some(id=r.id, title=r.title, description=r.description)
                                               for r in s.rows]) for s in part.sections]
        return _interactive("list", part.text, {"button": part.button, "sections": sections})
    if isinstance(part, ReactionPart):
        if reacts_to:
            return {"type": "reaction", "reaction": {"message_id": reacts_to, "emoji": part.emoji}}
        return {"type": "text", "text": {"preview_url": False, "body": part.emoji}}
    raise TypeError(f"not a rich reply part: {part!r}")  # pragma: no cover - the union is closed


def threads(part: RichPart) -> bool:
    """Whether the part may carry a ``context`` (a quote of the player's message): a reaction names it itself."""
    return not isinstance(part, ReactionPart)
