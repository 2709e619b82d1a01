"""WhatsApp webhook bodies -> records (pure: no I/O).

Meta batches several entries, changes, messages and statuses into one POST; every one is walked, in order.
Shapes vary by API version and rollout (the tests read real ones through :mod:`tests.support.whatsapp_fixtures`).
Every message a player sends gets an outcome, never silence:

==========================================================  ==================================================
text, template quick-reply button, interactive reply         :class:`InboundMessage` (a chat turn; how a tap
                                                             reads: :mod:`worker.ingress.taps`)
image                                                        :class:`InboundMessage` with ``media`` (the caption
                                                             is the text, maybe empty)
location                                                     :class:`InboundMessage` (``location_as="turn"``, the
                                                             default) or :class:`InboundEvent` (``"event"``)
reaction                                                     :class:`InboundEvent`; a removed reaction is
                                                             :class:`Unsupported` (nothing to tell the model)
audio/voice, video, document, sticker, contacts,             :class:`InboundNotice` (the configured short answer)
``unsupported``, ``unknown``, any other type
system (identity or number changed)                          :class:`Unsupported`
==========================================================  ==================================================

Statuses are :class:`StatusUpdate` (naming the reply part they are about when they carry the callback data Parley
sent the message with). An account-level error, a change of another field and anything malformed
become :class:`Unsupported` records — parsing never raises on a body that has an ``entry`` list, whatever is
inside it.

Identity (conversation id and reply recipient). Since 2026 webhooks carry business-scoped user ids (BSUIDs:
``messages[].from_user_id``, ``contacts[].user_id``, ``statuses[].recipient_user_id``), and for users with a
username Meta may omit ``from``, ``wa_id`` and ``recipient_id``. The conversation id is:

1. the phone number (``from`` / ``recipient_id``) when the record has one;
2. else the phone number (``wa_id``) of the contact whose ``user_id`` is the record's BSUID, when the
   webhook's ``contacts`` give one (so a phone-keyed conversation keeps its id when a later webhook
   leads with the BSUID);
3. else the BSUID itself (``from_user_id`` / ``recipient_user_id``, or the user id of the only contact).

Phone first, so conversations that existed before BSUIDs keep their id; the BSUID only when there is no phone
at all. The reply recipient is the same value (the sender puts a BSUID in ``recipient`` and a phone number in
``to``). The chosen id must pass :func:`worker.envelopes.addresses.validate_conversation_id`; when it does not, the
record becomes an :class:`Unsupported` with the reason (we do not fall back to another id, which would
silently split one user's conversation in two). The id is never derived from the wamid.
"""

from __future__ import annotations

import gc
import hashlib
import hmac
import json
import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, ValidationError

from worker.channels.ids import is_media_id
from worker.envelopes.addresses import validate_conversation_id
from worker.envelopes.inputs import Media, parse_part_callback
from worker.errors import InvalidConversationIdError, WebhookTooLargeError
from worker.ingress.business_number import business_number, on_number
from worker.ingress.taps import TAP_TYPES, tap_text

if TYPE_CHECKING:
    from worker.settings.business_numbers import Numbers

#: Message types answered as chat turns when they carry text; without it they are malformed (ignored), not
#: something the player could expect an answer to.
_CHAT_TYPES = ("text", "button")

LocationAs = Literal["event", "turn"]


class InboundMessage(BaseModel):
    """A user's message that becomes a chat turn (text, template quick-reply button, interactive reply, an image
    with its caption, a location when locations are turns)."""

    wamid: str
    conversation_id: str
    sender: str = Field(description="Where the reply goes: the phone number, else the BSUID (== conversation_id).")
    type: str
    text: str = Field(description="What the player wrote; an image's caption, empty when it has none.")
    reply_to: str | None = Field(None, description="The wamid of our message the user replied to (context.id).")
    timestamp: str | None = None
    user_id: str | None = Field(None, description="The sender's BSUID when the webhook carries one.")
    media: Media | None = Field(None, description="The picture the player sent (by Cloud API media id).")

    @property
    def thread(self) -> str:
        """The message the answer quotes: for a tap, the message whose button or row was tapped (so the answer
        sits under the question it settles), else the player's own message."""
        return self.reply_to if self.type in TAP_TYPES and self.reply_to else self.wamid


class InboundEvent(BaseModel):
    """A user's message that becomes a game event: no model call and no reply, the model reads ``text`` as
    context on the next turn (a shared location, a reaction to one of our replies)."""

    wamid: str
    conversation_id: str
    type: str
    text: str
    timestamp: str | None = None
    user_id: str | None = None


class InboundNotice(BaseModel):
    """A user's message Parley cannot read (a voice note, video, document, sticker, contact card, ``unsupported``
    or unknown type): the player gets the configured short answer, in order with the other replies."""

    wamid: str
    conversation_id: str
    sender: str = Field(description="Where the short answer goes (as for a turn).")
    type: str = Field(description="What it was, for logs: the message type, ``audio:voice`` for a voice note, "
                                  "``unsupported:<what>`` when Meta names it.")
    reason: str = ""
    timestamp: str | None = None
    user_id: str | None = None


class StatusUpdate(BaseModel):
    """A delivery status of a message we sent: sent, delivered, read, failed, ...

    When the status carries the callback data Parley sent the message with (``biz_opaque_callback_data``, see
    :func:`worker.envelopes.inputs.part_callback`), ``reply_id`` and ``part`` name the reply part it was, and
    ``conversation_id`` is the conversation that reply belongs to (its recipient may be another id)."""

    wamid: str
    status: str
    conversation_id: str
    reply_id: str | None = None
    part: int = 0
    traceparent: str | None = None  # the send's, from the callback data: the status continues the reply's trace
    timestamp: str | None = None
    errors: list[tuple[int | None, str]] = Field(default_factory=list,
                                                 description="(code, message or title + details) per error.")

    def detail(self) -> str:
        """The errors as one line for the store (``"131047: Re-engagement message ...; ..."``)."""
        return "; ".join(f"{code}: {text}" if code is not None else text for code, text in self.errors)


class Unsupported(BaseModel):
    """Something we do not turn into a turn or a status, with the reason (for the log and the summary)."""

    kind: str
    wamid: str | None = None
    reason: str = ""


Record = InboundMessage | InboundEvent | InboundNotice | StatusUpdate | Unsupported


# --- shape helpers: never trust a type -----------------------------------------------------------------

def _str(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _timestamp(v: Any) -> str | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return str(v)
    return _str(v)


def _phone(v: Any) -> str | None:
    text = _str(v)
    return text.strip().lstrip("+") or None if text is not None else None


def _contacts(value: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in _list(value.get("contacts")) if isinstance(c, dict)]


def _choose_identity(phone: str | None, user_id: str | None,
                     contacts: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """(conversation id, BSUID) — see the module docstring for the order."""
    if user_id is None and len(contacts) == 1:
        user_id = _str(contacts[0].get("user_id"))
    if phone is None and user_id is not None:
        for contact in contacts:
            if _str(contact.get("user_id")) == user_id:
                phone = _phone(contact.get("wa_id"))
                break
    if phone is None and user_id is None and len(contacts) == 1:
        phone = _phone(contacts[0].get("wa_id"))
    return phone or user_id, user_id


def _invalid_id(cid: str | None) -> str | None:
    """Why ``cid`` cannot be a conversation id, or ``None`` when it can."""
    if cid is None:
        return "no sender or recipient id (neither phone number nor business-scoped id)"
    try:
        validate_conversation_id(cid)
    except InvalidConversationIdError as exc:
        return f"invalid conversation id: {exc}"
    return None


def _text_of(msg: dict[str, Any]) -> str | None:
    kind = msg.get("type")
    if kind == "text":
        return _str(_dict(msg.get("text")).get("body"))
    return tap_text(msg)  # a template quick-reply button, an interactive button or list reply


def _errors(obj: dict[str, Any]) -> list[tuple[int | None, str]]:
    out: list[tuple[int | None, str]] = []
    for error in _list(obj.get("errors")):
        if not isinstance(error, dict):
            continue
        code = error.get("code")
        if isinstance(code, str) and code.isdigit():
            code = int(code)
        text = _str(error.get("message")) or _str(error.get("title")) or ""
        details = _str(_dict(error.get("error_data")).get("details")) or _str(error.get("details"))
        if details and details != text:
            text = f"{text} ({details})" if text else details
        out.append((code if isinstance(code, int) and not isinstance(code, bool) else None, text))
    return out


# --- records ------------------------------------------------------------------------------------------

def _number(v: Any) -> float | None:
    """A coordinate: a JSON number (Meta's shape) or a numeric string, finite."""
    if isinstance(v, bool):
        return None
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            return None
    if isinstance(v, int | float) and math.isfinite(v):
        return float(v)
    return None


def _coordinate(v: float) -> str:
    # Five decimals are about a metre: enough for a game's map, and no float noise (37.44221496582).
    return f"{v:.5f}".rstrip("0").rstrip(".")


def location_text(location: dict[str, Any]) -> str | None:
    """``The player shared their location: <name>, <address> (lat 53.99, lon -1.54)``, leaving out what the pin
    does not carry; ``None`` when it carries nothing usable."""
    name, address = _str(location.get("name")), _str(location.get("address"))
    lat, lon = _number(location.get("latitude")), _number(location.get("longitude"))
    where = ", ".join(p.strip() for p in (name, address) if p and p.strip())
    coords = (f"lat {_coordinate(lat)}, lon {_coordinate(lon)}"
              if lat is not None and lon is not None and abs(lat) <= 90 and abs(lon) <= 180 else "")
    if not where and not coords:
        return None
    if where and coords:
        return f"The player shared their location: {where} ({coords})"
    return f"The player shared their location: {where or coords}"


def reaction_text(reaction: dict[str, Any]) -> str | None:
    """``The player reacted 👎 to your message <wamid>``; ``None`` for a removed reaction (no or empty emoji)."""
    emoji = _str(reaction.get("emoji"))
    if emoji is None or not emoji.strip():
        return None
    target = _str(reaction.get("message_id"))
    return f"The player reacted {emoji} to your message {target}" if target else f"The player reacted {emoji}"


def _media(image: dict[str, Any]) -> Media | None:
    media_id = _str(image.get("id"))
    if media_id is None or not is_media_id(media_id):  # never queued: it would become part of a URL with the token
        return None
    try:
        return Media(id=media_id, mime_type=_str(image.get("mime_type")), sha256=_str(image.get("sha256")))
    except ValidationError:  # an id or type far longer than Meta's: not something the worker could fetch
        return None


def _notice_type(kind: str, msg: dict[str, Any]) -> str:
    if kind == "audio" and _dict(msg.get("audio")).get("voice") is True:
        return "audio:voice"
    if kind == "unsupported":
        what = _str(_dict(msg.get("unsupported")).get("type"))
        return f"unsupported:{what}" if what else kind
    if kind == "interactive":
        what = _str(_dict(msg.get("interactive")).get("type"))
        return f"interactive:{what}" if what else kind
    return kind


def _message(msg: dict[str, Any], contacts: list[dict[str, Any]], location_as: LocationAs) -> Record:
    wamid = _str(msg.get("id"))
    kind = _str(msg.get("type")) or "unknown"
    if wamid is None:
        return Unsupported(kind=kind, reason="message without an id")
    if kind == "system":  # the number or the identity key changed: Meta's notice to us, not the player's words
        return Unsupported(kind=kind, wamid=wamid, reason="system messages are not chat turns")
    text = _text_of(msg)
    if text is None and kind in _CHAT_TYPES:
        return Unsupported(kind=kind, wamid=wamid, reason=f"{kind} message without text")
    if kind == "reaction" and reaction_text(_dict(msg.get("reaction"))) is None:
        return Unsupported(kind=kind, wamid=wamid, reason="reaction removed")
    cid, user_id = _choose_identity(_phone(msg.get("from")), _str(msg.get("from_user_id")), contacts)
    bad = _invalid_id(cid)
    if bad is not None or cid is None:
        return Unsupported(kind=kind, wamid=wamid, reason=bad or "no id")
    ts = _timestamp(msg.get("timestamp"))
    ctx = _dict(msg.get("context"))
    turn = {"wamid": wamid, "conversation_id": cid, "sender": cid, "type": kind, "reply_to": _str(ctx.get("id")),
            "timestamp": ts, "user_id": user_id}
    if text is not None:
        return InboundMessage(text=text, **turn)
    if kind == "image":
        image = _dict(msg.get("image"))
        media, caption = _media(image), _str(image.get("caption")) or ""
        if media is not None or caption.strip():
            # Without a usable media id the caption alone is still the player's words.
            return InboundMessage(text=caption, media=media, **turn)
        if image.get("id") is not None:  # an id that is not a media id, and no caption: the short answer, saying why
            return InboundNotice(wamid=wamid, conversation_id=cid, sender=cid, type="image:bad_media_id",
                                 reason="image with an invalid media id", timestamp=ts, user_id=user_id)
    elif kind == "location":
        said = location_text(_dict(msg.get("location")))
        if said is not None:
            if location_as == "turn":
                return InboundMessage(text=said, **turn)
            return InboundEvent(wamid=wamid, conversation_id=cid, type=kind, text=said, timestamp=ts,
                                user_id=user_id)
    elif kind == "reaction":
        said = reaction_text(_dict(msg.get("reaction")))
        if said is not None:
            return InboundEvent(wamid=wamid, conversation_id=cid, type=kind, text=said, timestamp=ts,
                                user_id=user_id)
    # Everything else the player sent, including a location or image we could not read: they get a short
    # answer rather than silence.
    errors = _errors(msg)
    why = f"{kind} messages are not read" + (f" ({errors})" if errors else "")
    return InboundNotice(wamid=wamid, conversation_id=cid, sender=cid, type=_notice_type(kind, msg), reason=why,
                         timestamp=ts, user_id=user_id)


def _status(st: dict[str, Any], contacts: list[dict[str, Any]]) -> Record:
    wamid = _str(st.get("id"))
    status = _str(st.get("status"))
    if wamid is None or status is None:
        return Unsupported(kind="status", wamid=wamid, reason="status without an id or a status")
    ref = parse_part_callback(st.get("biz_opaque_callback_data"))
    if ref is not None:
        return StatusUpdate(wamid=wamid, status=status, conversation_id=ref.conversation_id, reply_id=ref.reply_id,
                            part=ref.part, traceparent=ref.traceparent, errors=_errors(st),
                            timestamp=_timestamp(st.get("timestamp")))
    cid, _ = _choose_identity(_phone(st.get("recipient_id")), _str(st.get("recipient_user_id")), contacts)
    bad = _invalid_id(cid)
    if bad is not None or cid is None:
        return Unsupported(kind="status", wamid=wamid, reason=bad or "no id")
    return StatusUpdate(wamid=wamid, status=status, conversation_id=cid, errors=_errors(st),
                        timestamp=_timestamp(st.get("timestamp")))


# --- size and age --------------------------------------------------------------------------------------

#: Meta batches at most 1000 updates in one POST; each is an entry, a change and a message or status at most, so
#: a body with more items than this is not Meta's, and walking it would cost seconds and gigabytes (a signed 8 MiB
#: body of empty entries makes millions of records).
MAX_WEBHOOK_ITEMS = 10_000


#: JSON objects decoded from one body before it is refused: a Meta update holds a handful (the message, its text,
#: context, contact and profile, ...), so this is ten times Meta's largest batch.
MAX_WEBHOOK_OBJECTS = 100_000


def decode_webhook(raw: bytes | bytearray, max_objects: int = MAX_WEBHOOK_OBJECTS) -> Any:
    """The JSON of a webhook body. Raises ``ValueError`` when it is not JSON (or nested too deep), and
    :class:`WebhookTooLargeError` as soon as it has decoded more than ``max_objects`` objects: a body of millions
    of tiny objects is refused early instead of costing seconds and hundreds of MB. (The hook also hands the GIL
    to other threads between objects, which the decoder alone would hold until it ends.)"""
    left = max_objects

    def count(obj: dict[str, Any]) -> dict[str, Any]:
        nonlocal left
        left -= 1
        if left < 0:
            raise WebhookTooLargeError(f"more than {max_objects} JSON objects in one webhook (Meta sends at most "
                                      f"1000 updates)")
        return obj

    # The cyclic GC stays out of the decode: JSON makes no cycles, and a body of millions of small arrays would
    # otherwise set off collection after collection (measured: 2.1 s instead of 0.4 s for 8 MiB of them).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return json.loads(raw, object_hook=count)
    except RecursionError as exc:
        raise ValueError(f"nested too deep ({exc})") from None
    finally:
        if was_enabled:
            gc.enable()


def check_update_count(body: Any, limit: int = MAX_WEBHOOK_ITEMS) -> None:
    """Raise :class:`WebhookTooLargeError` when ``body`` holds more than ``limit`` items; stops counting at the limit,
    so the check costs at most ``limit`` steps whatever the body."""
    count = 0
    for entry in _list(_dict(body).get("entry")):
        count += 1
        for change in _list(_dict(entry).get("changes")):
            value = _dict(_dict(change).get("value"))
            count += 1 + len(_list(value.get("messages"))) + len(_list(value.get("statuses")))
            if count > limit:
                break
        if count > limit:
            raise WebhookTooLargeError(f"more than {limit} entries, changes, messages and statuses in one webhook "
                                      f"(Meta sends at most 1000 updates)")


def record_age(rec: Record, now: float) -> float | None:
    """Seconds since the message or status was sent (its ``timestamp``, Unix seconds), ``None`` when it has none
    that reads as one (Meta always sends it; an unreadable one is not held against the player)."""
    ts = getattr(rec, "timestamp", None)
    if not isinstance(ts, str) or not ts.isascii() or not ts.isdigit() or len(ts) > 12:
        return None
    return now - int(ts)


def parse_webhook(body: Any, *, location_as: LocationAs = "turn", numbers: Numbers | None = None) -> list[Record]:
    """Every record in a webhook body (already decoded from JSON), in order. ``location_as`` says whether a shared
    location becomes a game event or a chat turn (``PARLEY_LOCATION_AS``). With ``numbers`` (several business
    numbers), each change's records go to the conversations of the number it names (:mod:`worker.ingress.business_number`).

    Raises ``ValueError`` only when the body is not a webhook at all (not an object with an ``entry`` list);
    anything unexpected inside becomes an :class:`Unsupported` record.
    """
    if not isinstance(body, dict) or not isinstance(body.get("entry"), list):
        raise ValueError("not a WhatsApp webhook body: expected a JSON object with an 'entry' list")
    out: list[Record] = []
    for entry in body["entry"]:
        changes = _list(_dict(entry).get("changes"))
        if not changes:
            out.append(Unsupported(kind="entry", reason="entry without changes"))
        for change in changes:
            change = _dict(change)
            field = _str(change.get("field")) or "unknown"
            value = change.get("value")
            if not isinstance(value, dict):
                out.append(Unsupported(kind=f"change:{field}", reason="change without a value object"))
                continue
            before = len(out)
            contacts = _contacts(value)
            for msg in _list(value.get("messages")):
                out.append(_message(msg, contacts, location_as) if isinstance(msg, dict)
                           else Unsupported(kind="message", reason="message is not an object"))
            for st in _list(value.get("statuses")):
                out.append(_status(st, contacts) if isinstance(st, dict)
                           else Unsupported(kind="status", reason="status is not an object"))
            errors = _errors(value)
            if errors:
                out.append(Unsupported(kind="errors", reason=f"account/app error: {errors}"))
            if len(out) == before:
                out.append(Unsupported(kind=f"change:{field}", reason="nothing to do in this change"))
            elif numbers is not None:
                out[before:] = on_number(out[before:], business_number(value), numbers)
    return out


# --- authenticity -------------------------------------------------------------------------------------

def verify_signature(raw_body: bytes | bytearray, header: str | None, app_secret: str) -> bool:
    """Whether ``X-Hub-Signature-256`` is ``sha256=`` + the hex HMAC-SHA256 of ``raw_body`` with the app secret.

    Always over the raw bytes as received — Meta signs the body as sent (non-ASCII ``\\uXXXX``-escaped), so a
    re-serialisation of the parsed JSON does not match. Compared in constant time. An empty secret refuses
    everything.
    """
    if not header or not app_secret:
        return False
    scheme, sep, digest = header.strip().partition("=")
    if not sep or scheme.lower() != "sha256":
        return False
    expected = hmac.new(app_secret.encode(), raw_body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), digest.strip().lower().encode("ascii", "replace"))


def verify_handshake(mode: str | None, token: str | None, challenge: str | None, verify_token: str) -> str | None:
    """The challenge to echo (unchanged) when the subscription handshake is valid, else ``None``.

    An empty configured ``verify_token`` refuses every handshake."""
    if mode != "subscribe" or token is None or challenge is None or not verify_token:
        return None
    if not hmac.compare_digest(token.encode(), verify_token.encode()):
        return None
    return challenge
