"""The parts of a rich reply (WhatsApp): what each kind holds, checked against the Cloud API's limits, and the text
every other reader (the state, the console, the record, a template's parameter) sees of it.

A reply is an ordered list of parts. Plain text is kept as a ``str`` in the outbox (as before rich replies, so a
record written by an older worker reads unchanged); every other kind is one of the models here, tagged by ``type``.
:func:`parse_parts` turns the JSON form (``{"type": "location", ...}``) into parts or raises
:class:`~worker.errors.InvalidReplyPartError` naming the field, before anything is committed.

Limits, from the Cloud API's reference pages (developers.facebook.com/documentation/business-messaging/whatsapp/
messages/...): ``interactive-reply-buttons-messages`` (1-3 buttons; button title at most 20 characters, unique within
the message; button id at most 256 characters; body text at most 1024), ``interactive-list-messages`` (button label
20; at most 10 sections and 10 rows in all; section title 24; row title 24, row description 72, row id 200, unique),
``location-request-messages`` (body text 1024), ``image-messages`` (caption 1024) and ``location-messages``
(latitude and longitude in degrees). The body of a list is documented up to 4096 characters; Parley keeps every
interactive body at 1024, the strictest of them, so one rule holds for all. Beyond the numbers, refused at once
too: a reaction that is not one emoji (WhatsApp refuses it, after the turn was committed), a button or row id with
white space at either end (what a tap returns may not be the id sent), an image link that is not https.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

import regex
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from worker.errors import InvalidReplyPartError

MAX_TEXT_CHARS = 4096  # a text message's body
MAX_INTERACTIVE_BODY = 1024
MAX_CAPTION = 1024
MAX_BUTTONS = 3
MAX_BUTTON_TITLE = 20
MAX_BUTTON_ID = 256
MAX_LIST_BUTTON = 20
MAX_LIST_ROWS = 10
MAX_SECTIONS = 10
MAX_SECTION_TITLE = 24
MAX_ROW_TITLE = 24
MAX_ROW_DESCRIPTION = 72
MAX_ROW_ID = 200
MAX_NAME_CHARS = 1000  # a location's name or address: not documented; a bound so a record cannot grow without end
MAX_LINK_CHARS = 2000
MAX_EMOJI_CHARS = 16  # one emoji, with its modifiers and joiners


class _Part(BaseModel):
    """A part: ``type`` is required (no default), so the documented schema says so too."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)  # strict: JSON types, as the API documents


#: Not blank: at least one character that is not white space (the JSON Schema ``pattern`` is a search, as here).
SOME_TEXT = r"\S"


#: An id: not blank, and no white space at either end (WhatsApp trims or refuses it; the tap would not match).
TRIMMED = r"^\S(?:[\s\S]*\S)?$"
#: A link Meta's servers fetch for the player: https only (a plain http link can be read and changed on the way).
HTTPS_LINK = r"^https://\S+$"

#: The validation context under which stored records (a reply in the outbox, an operator's input in a mailbox) are
#: read back: the checks added after a record may have been written (https links, trimmed ids, one-emoji reactions)
#: hold for what is built now, not for what an older worker already queued, which goes out as it was accepted.
STORED = {"stored": True}


def _stored(info: ValidationInfo) -> bool:
    return isinstance(info.context, dict) and bool(info.context.get("stored"))


def _strict(pattern: str, what: str, value: str | None, info: ValidationInfo) -> str | None:
    # fullmatch: a Python "$" would also match before a final newline, which pydantic's patterns do not
    if value is not None and not _stored(info) and regex.fullmatch(pattern.strip("^$"), value) is None:
        raise ValueError(what)
    return value

# One user-perceived character (an extended grapheme cluster, Unicode's rule as the ``regex`` package implements
# it) that is an emoji: a pictograph (with any skin tone, variation selector or joined sequence), a flag (two
# regional indicators) or a keycap ("1" + U+FE0F + U+20E3).
_ONE_GRAPHEME = regex.compile(r"\X", regex.VERSION1)
_EMOJI_MARK = regex.compile(r"\p{Extended_Pictographic}|\p{Regional_Indicator}|\u20e3")


def is_one_emoji(text: str) -> bool:
    """Whether ``text`` is exactly one emoji (one grapheme cluster that is an emoji), as a reaction must be."""
    return _ONE_GRAPHEME.fullmatch(text) is not None and _EMOJI_MARK.search(text) is not None


def _body(limit: int) -> Any:
    return Field(min_length=1, max_length=limit, pattern=SOME_TEXT)


class TextPart(_Part):
    """A text message."""

    type: Literal["text"]
    text: str = _body(MAX_TEXT_CHARS)


class ImagePart(_Part):
    """A picture: a public ``link`` (https) or an uploaded ``media_id``, one of them, with an optional caption."""

    type: Literal["image"]
    link: str | None = Field(None, min_length=1, max_length=MAX_LINK_CHARS, pattern=r"^https?://\S+$")
    media_id: str | None = Field(None, min_length=1, max_length=256)
    caption: str | None = Field(None, max_length=MAX_CAPTION)

    @field_validator("link")
    @classmethod
    def _https(cls, link: str | None, info: ValidationInfo) -> str | None:
        return _strict(HTTPS_LINK, "an image link must be https://", link, info)

    @model_validator(mode="after")
    def _one_source(self) -> ImagePart:
        if (self.link is None) == (self.media_id is None):
            raise ValueError("an image needs exactly one of link and media_id")
        return self


class LocationPart(_Part):
    """A map pin."""

    type: Literal["location"]
    latitude: float = Field(ge=-90, le=90, allow_inf_nan=False)
    longitude: float = Field(ge=-180, le=180, allow_inf_nan=False)
    name: str | None = Field(None, max_length=MAX_NAME_CHARS)
    address: str | None = Field(None, max_length=MAX_NAME_CHARS)


class LocationRequestPart(_Part):
    """A request that the player share their location (body text and WhatsApp's own "Send location" button)."""

    type: Literal["location_request"]
    text: str = _body(MAX_INTERACTIVE_BODY)


class Button(_Part):
    """A reply button: its ``id`` comes back when the player taps it, its ``title`` is what they see."""

    id: str = Field(min_length=1, max_length=MAX_BUTTON_ID, pattern=SOME_TEXT)
    title: str = Field(min_length=1, max_length=MAX_BUTTON_TITLE, pattern=SOME_TEXT)

    @field_validator("id")
    @classmethod
    def _trimmed(cls, value: str, info: ValidationInfo) -> str:
        return _strict(TRIMMED, "an id has no white space at either end", value, info) or value


class ButtonsPart(_Part):
    """Body text with 1-3 reply buttons."""

    type: Literal["buttons"]
    text: str = _body(MAX_INTERACTIVE_BODY)
    buttons: list[Button] = Field(min_length=1, max_length=MAX_BUTTONS)

    @model_validator(mode="after")
    def _unique(self) -> ButtonsPart:
        _no_repeats("button id", [b.id for b in self.buttons])
        _no_repeats("button title", [b.title for b in self.buttons])
        return self


class Row(_Part):
    """One choice of a list."""

    id: str = Field(min_length=1, max_length=MAX_ROW_ID, pattern=SOME_TEXT)
    title: str = Field(min_length=1, max_length=MAX_ROW_TITLE, pattern=SOME_TEXT)
    description: str | None = Field(None, max_length=MAX_ROW_DESCRIPTION)

    @field_validator("id")
    @classmethod
    def _trimmed(cls, value: str, info: ValidationInfo) -> str:
        return _strict(TRIMMED, "an id has no white space at either end", value, info) or value


class Section(_Part):
    """A titled group of rows (the title is required by WhatsApp once a list has more than one section)."""

    title: str | None = Field(None, max_length=MAX_SECTION_TITLE)
    rows: list[Row] = Field(min_length=1, max_length=MAX_LIST_ROWS)


class ListPart(_Part):
    """Body text and a button (``button``, its label) that opens sections of rows; at most 10 rows in all."""

    type: Literal["list"]
    text: str = _body(MAX_INTERACTIVE_BODY)
    button: str = Field(min_length=1, max_length=MAX_LIST_BUTTON, pattern=SOME_TEXT)
    sections: list[Section] = Field(min_length=1, max_length=MAX_SECTIONS)

    @model_validator(mode="after")
    def _rows(self) -> ListPart:
        rows = [r for s in self.sections for r in s.rows]
        if len(rows) > MAX_LIST_ROWS:
            raise ValueError(f"a list holds at most {MAX_LIST_ROWS} rows in all, got {len(rows)}")
        if len(self.sections) > 1 and any(not s.title for s in self.sections):
            raise ValueError("every section needs a title when a list has more than one")
        _no_repeats("row id", [r.id for r in rows])
        return self


class ReactionPart(_Part):
    """An emoji reaction to the player's message (the one the reply answers)."""

    type: Literal["reaction"]
    emoji: str = Field(min_length=1, max_length=MAX_EMOJI_CHARS, pattern=SOME_TEXT)

    @field_validator("emoji")
    @classmethod
    def _one_emoji(cls, emoji: str, info: ValidationInfo) -> str:
        if not _stored(info) and not is_one_emoji(emoji):
            raise ValueError(f"a reaction is one emoji, got {emoji!r}")
        return emoji


def _no_repeats(what: str, values: list[str]) -> None:
    seen = {v for v in values if values.count(v) > 1}
    if seen:
        raise ValueError(f"{what}s must be unique, {sorted(seen)[0]!r} repeats")


#: A part that is not plain text: what the outbox keeps as a tagged object.
RichPart = Annotated[
    ImagePart | LocationPart | LocationRequestPart | ButtonsPart | ListPart | ReactionPart,
    Field(discriminator="type"),
]
Part = Annotated[
    TextPart | ImagePart | LocationPart | LocationRequestPart | ButtonsPart | ListPart | ReactionPart,
    Field(discriminator="type"),
]
#: One part as the outbox holds it: a text (a whole message, already split) or a rich part.
OutPart = str | RichPart

PART_TYPES = ("text", "image", "location", "location_request", "buttons", "list", "reaction")
#: Kinds WhatsApp sends as ``interactive`` messages: never outside the customer-service window.
INTERACTIVE = frozenset({"location_request", "buttons", "list"})

_PART: TypeAdapter[Any] = TypeAdapter(Part)


def parse_part(value: object, where: str = "part") -> TextPart | RichPart:
    """One part from its JSON form; :class:`InvalidReplyPartError` naming the field (``where`` + its path)."""
    if not isinstance(value, dict) or value.get("type") not in PART_TYPES:
        kind = value.get("type") if isinstance(value, dict) else None
        err = InvalidReplyPartError(f"{where}.type: {kind!r} is not a reply part's type (one of "
                                    f"{', '.join(PART_TYPES)})")
        err.field = f"{where}.type"
        raise err
    try:
        part: TextPart | RichPart = _PART.validate_python(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(p) for p in first["loc"][1:])  # [0] is the union's tag
        field = f"{where}.{path}" if path else where
        err = InvalidReplyPartError(f"{field}: {first['msg']}")
        err.field = field
        raise err from None
    return part


def parse_parts(values: Sequence[object], where: str = "parts") -> list[TextPart | RichPart]:
    """Every part of ``values`` (a list), each checked; the first bad one raises naming its index and field."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        err = InvalidReplyPartError(f"{where} must be a list of parts ({{\"type\": ..., ...}})")
        err.field = where
        raise err
    return [parse_part(v, f"{where}.{i}") for i, v in enumerate(values)]


def part_json(part: OutPart | TextPart) -> dict[str, Any]:
    """A part's JSON form (the one :func:`parse_part` reads)."""
    if isinstance(part, str):
        return {"type": "text", "text": part}
    return part.model_dump(mode="json", exclude_none=True)


def render(part: OutPart | TextPart) -> str:
    """What the player saw, as text: the assistant's side in the state (every provider reads text), the console's
    line, a template's parameter, the record's part."""
    if isinstance(part, str):
        return part
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, ImagePart):
        return f"[image{': ' + part.caption if part.caption else ''}]"
    if isinstance(part, LocationPart):
        label = ", ".join(x for x in (part.name, part.address) if x)
        return f"[location: {label + ' ' if label else ''}({part.latitude}, {part.longitude})]"
    if isinstance(part, LocationRequestPart):
        return f"{part.text}\n[button: Send location]"
    if isinstance(part, ButtonsPart):
        return f"{part.text}\n[buttons: {' | '.join(b.title for b in part.buttons)}]"
    if isinstance(part, ListPart):
        rows = "; ".join(r.title + (f" ({r.description})" if r.description else "")
                         for s in part.sections for r in s.rows)
        return f"{part.text}\n[list {part.button}: {rows}]"
    return f"[reaction: {part.emoji}]"


def render_all(parts: Sequence[OutPart | TextPart]) -> str:
    """The parts' renderings, a blank line apart."""
    return "\n\n".join(render(p) for p in parts)


def out_part(value: str | dict[str, Any]) -> OutPart:
    """A part as the outbox keeps it, from a text or a part's JSON form (a text part becomes its text)."""
    if isinstance(value, str):
        return value
    part = parse_part(value)
    return part.text if isinstance(part, TextPart) else part
