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
system: number or user id changed                            :class:`IdentityChange`
system (anything else, e.g. the identity key changed)        :class:`Unsupported`
==========================================================  ==================================================

Meta's ``user_preferences`` webhook (a player stopping or resuming marketing messages) is
:class:`MarketingPreference`. Statuses are :class:`StatusUpdate` (naming the reply part they are about when they carry the callback data Parley
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
silently split one user's conversation in two). The id is never derived from the wamid. Each record also carries
the ``phone`` and ``user_id`` it names: the ingress links them (:mod:`worker.store.identities`), so a player keyed
by phone whose later webhooks carry only the BSUID stays in the same conversation.
"""

from __future__ import annotations

import gc
import hashlib
import hmac
import json
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from worker.channels.ids import is_media_id
from worker.envelopes.inputs import Media, parse_part_callback
from worker.errors import WebhookTooLargeError
from worker.ingress.business_number import business_number, on_number
from worker.ingress.inbound import (
    IdentityChange,
    InboundEvent,
    InboundMessage,
    InboundNotice,
    LocationAs,
    MarketingPreference,
    Record,
    StatusUpdate,
    Unsupported,
)
from worker.ingress.taps import tap_text
from worker.ingress.webhook_fields import (
    as_dict,
    as_list,
    as_number,
    as_phone,
    as_str,
    as_timestamp,
    contacts_of,
    coordinate,
    errors_of,
    identities,
    invalid_id,
)

if TYPE_CHECKING:
    from worker.settings.business_numbers import Numbers

__all__ = [
    "IdentityChange", "InboundEvent", "InboundMessage", "InboundNotice", "LocationAs", "MarketingPreference", "Record",
    "StatusUpdate", "Unsupported",
    "check_update_count", "decode_webhook", "location_text", "parse_webhook", "reaction_text", "record_age", "sent_at",
    "verify_handshake", "verify_signature",
]

#: Message types answered as chat turns when they carry text; without it they are malformed (ignored), not
#: something the player could expect an answer to.
_CHAT_TYPES = ("text", "button")


def _text_of(msg: dict[str, Any]) -> str | None:
    kind = msg.get("type")
    if kind == "text":
        return as_str(as_dict(msg.get("text")).get("body"))
    return tap_text(msg)  # a template quick-reply button, an interactive button or list reply


# --- records ------------------------------------------------------------------------------------------

def location_text(location: dict[str, Any]) -> str | None:
    """``The player shared their location: <name>, <address> (lat 53.99, lon -1.54)``, leaving out what the pin
    does not carry; ``None`` when it carries nothing usable."""
    name, address = as_str(location.get("name")), as_str(location.get("address"))
    lat, lon = as_number(location.get("latitude")), as_number(location.get("longitude"))
    where = ", ".join(p.strip() for p in (name, address) if p and p.strip())
    coords = (f"lat {coordinate(lat)}, lon {coordinate(lon)}"
              if lat is not None and lon is not None and abs(lat) <= 90 and abs(lon) <= 180 else "")
    if not where and not coords:
        return None
    if where and coords:
        return f"The player shared their location: {where} ({coords})"
    return f"The player shared their location: {where or coords}"


def reaction_text(reaction: dict[str, Any]) -> str | None:
    """``The player reacted 👎 to your message <wamid>``; ``None`` for a removed reaction (no or empty emoji)."""
    emoji = as_str(reaction.get("emoji"))
    if emoji is None or not emoji.strip():
        return None
    target = as_str(reaction.get("message_id"))
    return f"The player reacted {emoji} to your message {target}" if target else f"The player reacted {emoji}"


def _media(image: dict[str, Any]) -> Media | None:
    media_id = as_str(image.get("id"))
    if media_id is None or not is_media_id(media_id):  # never queued: it would become part of a URL with the token
        return None
    try:
        return Media(id=media_id, mime_type=as_str(image.get("mime_type")), sha256=as_str(image.get("sha256")))
    except ValidationError:  # an id or type far longer than Meta's: not something the worker could fetch
        return None


def _notice_type(kind: str, msg: dict[str, Any]) -> str:
    if kind == "audio" and as_dict(msg.get("audio")).get("voice") is True:
        return "audio:voice"
    if kind == "unsupported":
        what = as_str(as_dict(msg.get("unsupported")).get("type"))
        return f"unsupported:{what}" if what else kind
    if kind == "interactive":
        what = as_str(as_dict(msg.get("interactive")).get("type"))
        return f"interactive:{what}" if what else kind
    return kind


def _message(msg: dict[str, Any], contacts: list[dict[str, Any]], location_as: LocationAs) -> Record:
    wamid = as_str(msg.get("id"))
    kind = as_str(msg.get("type")) or "unknown"
    if wamid is None:
        return Unsupported(kind=kind, reason="message without an id")
    if kind == "system":  # the number or the identity key changed: Meta's notice to us, not the player's words
        return _system(msg, wamid, contacts)
    text = _text_of(msg)
    if text is None and kind in _CHAT_TYPES:
        return Unsupported(kind=kind, wamid=wamid, reason=f"{kind} message without text")
    if kind == "reaction" and reaction_text(as_dict(msg.get("reaction"))) is None:
        return Unsupported(kind=kind, wamid=wamid, reason="reaction removed")
    phone, user_id = identities(as_phone(msg.get("from")), as_str(msg.get("from_user_id")), contacts)
    cid = phone or user_id
    bad = invalid_id(cid)
    if phone is not None and user_id is not None and invalid_id(user_id) is not None:
        user_id = None  # a BSUID that cannot be a key is not linked: the phone number still names the player
    if bad is not None or cid is None:
        return Unsupported(kind=kind, wamid=wamid, reason=bad or "no id")
    ts = as_timestamp(msg.get("timestamp"))
    ctx = as_dict(msg.get("context"))
    turn = {"wamid": wamid, "conversation_id": cid, "sender": cid, "type": kind, "reply_to": as_str(ctx.get("id")),
            "timestamp": ts, "user_id": user_id, "phone": phone}
    if text is not None:
        return InboundMessage(text=text, **turn)
    if kind == "image":
        image = as_dict(msg.get("image"))
        media, caption = _media(image), as_str(image.get("caption")) or ""
        if media is not None or caption.strip():
            # Without a usable media id the caption alone is still the player's words.
            return InboundMessage(text=caption, media=media, **turn)
        if image.get("id") is not None:  # an id that is not a media id, and no caption: the short answer, saying why
            return InboundNotice(wamid=wamid, conversation_id=cid, sender=cid, type="image:bad_media_id",
                                 reason="image with an invalid media id", timestamp=ts, user_id=user_id,
                                 phone=phone)
    elif kind == "location":
        said = location_text(as_dict(msg.get("location")))
        if said is not None:
            if location_as == "turn":
                return InboundMessage(text=said, **turn)
            return InboundEvent(wamid=wamid, conversation_id=cid, type=kind, text=said, timestamp=ts,
                                user_id=user_id, phone=phone)
    elif kind == "reaction":
        said = reaction_text(as_dict(msg.get("reaction")))
        if said is not None:
            return InboundEvent(wamid=wamid, conversation_id=cid, type=kind, text=said, timestamp=ts,
                                user_id=user_id, phone=phone)
    # Everything else the player sent, including a location or image we could not read: they get a short
    # answer rather than silence.
    errors = errors_of(msg)
    why = f"{kind} messages are not read" + (f" ({errors})" if errors else "")
    return InboundNotice(wamid=wamid, conversation_id=cid, sender=cid, type=_notice_type(kind, msg), reason=why,
                         timestamp=ts, user_id=user_id, phone=phone)


#: Meta's system message types that move a player's id: the field that changed and where the new value is.
_ID_CHANGES = {"user_changed_number": ("phone", ("wa_id", "new_wa_id")),
               "customer_changed_number": ("phone", ("new_wa_id", "wa_id")),
               "user_changed_user_id": ("user_id", ("user_id", "new_user_id"))}


def _system(msg: dict[str, Any], wamid: str, contacts: list[dict[str, Any]]) -> Record:
    """A system message: an :class:`IdentityChange` when it moves the player's phone number or user id, else
    :class:`Unsupported` (nothing the player said)."""
    system = as_dict(msg.get("system"))
    what = as_str(system.get("type")) or ""
    change = _ID_CHANGES.get(what)
    if change is None:
        return Unsupported(kind="system", wamid=wamid, reason=f"system message {what or '(untyped)'} is not a chat turn")
    field, new_keys = change
    phone, user_id = identities(as_phone(msg.get("from")), as_str(msg.get("from_user_id")), contacts)
    old = phone if field == "phone" else user_id
    read = as_phone if field == "phone" else as_str
    new = next((v for v in (read(system.get(k)) for k in new_keys) if v is not None), None)
    bad = invalid_id(old) or invalid_id(new)
    if bad is not None or old is None or new is None or old == new:
        return Unsupported(kind=f"system:{what}", wamid=wamid, reason=bad or "no old or new id")
    return IdentityChange(wamid=wamid, field=field, old=old, new=new, timestamp=as_timestamp(msg.get("timestamp")))


def _preference(pref: dict[str, Any], contacts: list[dict[str, Any]]) -> Record:
    """One entry of a ``user_preferences`` webhook: a player stopping or resuming marketing messages."""
    value, category = as_str(pref.get("value")), as_str(pref.get("category")) or "marketing_messages"
    phone, user_id = identities(as_phone(pref.get("wa_id")), as_str(pref.get("user_id")), contacts)
    bad = invalid_id(phone or user_id)
    if value not in ("stop", "resume") or category != "marketing_messages" or bad is not None:
        return Unsupported(kind="user_preferences", reason=bad or f"preference {category}={value} not read")
    return MarketingPreference(phone=phone, user_id=user_id, stop=value == "stop", category=category,
                               timestamp=as_timestamp(pref.get("timestamp")))


def _status(st: dict[str, Any], contacts: list[dict[str, Any]]) -> Record:
    wamid = as_str(st.get("id"))
    status = as_str(st.get("status"))
    if wamid is None or status is None:
        return Unsupported(kind="status", wamid=wamid, reason="status without an id or a status")
    ref = parse_part_callback(st.get("biz_opaque_callback_data"))
    if ref is not None:
        return StatusUpdate(wamid=wamid, status=status, conversation_id=ref.conversation_id, reply_id=ref.reply_id,
                            part=ref.part, traceparent=ref.traceparent, errors=errors_of(st),
                            timestamp=as_timestamp(st.get("timestamp")))
    phone, user_id = identities(as_phone(st.get("recipient_id")), as_str(st.get("recipient_user_id")), contacts)
    cid = phone or user_id
    bad = invalid_id(cid)
    if phone is not None and user_id is not None and invalid_id(user_id) is not None:
        user_id = None
    if bad is not None or cid is None:
        return Unsupported(kind="status", wamid=wamid, reason=bad or "no id")
    return StatusUpdate(wamid=wamid, status=status, conversation_id=cid, errors=errors_of(st),
                        timestamp=as_timestamp(st.get("timestamp")), phone=phone, user_id=user_id)


# --- size and age --------------------------------------------------------------------------------------

#: Meta batches at most 1000 updates in one POST; each is an entry, a change and a message or status at most, so
#: a body with more items than this is not Meta's, and walking it would cost seconds and gigabytes (a signed 8 MiB
#: body of empty entries makes millions of records).
MAX_WEBHOOK_ITEMS = 10_000


#: JSON objects decoded from one body before it is refused: a Meta update holds a handful (the message, its text,
#: context, contact and profile, ...), so this is ten times Meta's largest batch.
MAX_WEBHOOK_OBJECTS = 100_000


def decode_webhook(raw: bytes | bytearray, max_objects: int = MAX_WEBHOOK_OBJECTS,
                   endpoint: str = "the webhook (Meta sends at most 1000 updates in one POST)") -> Any:
    """The JSON of a webhook body (or of another endpoint's: ``endpoint`` names it in the error). Raises
    ``ValueError`` when it is not JSON (or nested too deep), and :class:`WebhookTooLargeError` as soon as it has
    decoded more than ``max_objects`` objects: a body of millions of tiny objects is refused early instead of costing
    seconds and hundreds of MB. (The hook also hands the GIL to other threads between objects, which the decoder
    alone would hold until it ends.)"""
    left = max_objects

    def count(obj: dict[str, Any]) -> dict[str, Any]:
        nonlocal left
        left -= 1
        if left < 0:
            raise WebhookTooLargeError(f"more than {max_objects} JSON objects in one body of {endpoint}")
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
    for entry in as_list(as_dict(body).get("entry")):
        count += 1
        for change in as_list(as_dict(entry).get("changes")):
            value = as_dict(as_dict(change).get("value"))
            count += 1 + len(as_list(value.get("messages"))) + len(as_list(value.get("statuses")))
            if count > limit:
                break
        if count > limit:
            raise WebhookTooLargeError(f"more than {limit} entries, changes, messages and statuses in one webhook "
                                      f"(Meta sends at most 1000 updates)")


def sent_at(rec: Record) -> int | None:
    """When the message or status was sent (its ``timestamp``, Unix seconds), ``None`` when it has none that reads
    as one (Meta always sends it; an unreadable one is not held against the player)."""
    ts = getattr(rec, "timestamp", None)
    if not isinstance(ts, str) or not ts.isascii() or not ts.isdigit() or len(ts) > 12:
        return None
    return int(ts)


def record_age(rec: Record, now: float) -> float | None:
    """Seconds since the message or status was sent (see :func:`sent_at`), ``None`` when that is not known."""
    sent = sent_at(rec)
    return None if sent is None else now - sent


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
        changes = as_list(as_dict(entry).get("changes"))
        if not changes:
            out.append(Unsupported(kind="entry", reason="entry without changes"))
        for change in changes:
            change = as_dict(change)
            field = as_str(change.get("field")) or "unknown"
            value = change.get("value")
            if not isinstance(value, dict):
                out.append(Unsupported(kind=f"change:{field}", reason="change without a value object"))
                continue
            before = len(out)
            contacts = contacts_of(value)
            for msg in as_list(value.get("messages")):
                out.append(_message(msg, contacts, location_as) if isinstance(msg, dict)
                           else Unsupported(kind="message", reason="message is not an object"))
            for st in as_list(value.get("statuses")):
                out.append(_status(st, contacts) if isinstance(st, dict)
                           else Unsupported(kind="status", reason="status is not an object"))
            for pref in as_list(value.get("user_preferences")):
                out.append(_preference(pref, contacts) if isinstance(pref, dict)
                           else Unsupported(kind="user_preferences", reason="preference is not an object"))
            errors = errors_of(value)
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
