"""WhatsApp webhook bodies -> records (pure: no I/O).

Meta batches several entries, changes, messages and statuses into one POST; every one is walked, in order.
Shapes vary by API version and rollout (see ``../shared/fixtures/whatsapp``, next to the repository): a message we
do not turn into a chat turn (media, reactions, system messages, ``unsupported``/``unknown``), an account-level error, a change of
another field and anything malformed become :class:`Unsupported` records — parsing never raises on a body
that has an ``entry`` list, whatever is inside it.

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
``to``). The chosen id must pass :func:`worker.store.keys.validate_conversation_id`; when it does not, the
record becomes an :class:`Unsupported` with the reason (we do not fall back to another id, which would
silently split one user's conversation in two). The id is never derived from the wamid.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from pydantic import BaseModel, Field

from worker.errors import InvalidConversationIdError
from worker.store.keys import validate_conversation_id

#: Interactive reply kinds whose ``title`` is what the user tapped.
_INTERACTIVE_REPLIES = ("button_reply", "list_reply")


class InboundMessage(BaseModel):
    """A user's message that becomes a chat turn (text, template quick-reply button, interactive reply)."""

    wamid: str
    conversation_id: str
    sender: str = Field(description="Where the reply goes: the phone number, else the BSUID (== conversation_id).")
    type: str
    text: str
    reply_to: str | None = Field(None, description="The wamid of our message the user replied to (context.id).")
    timestamp: str | None = None
    user_id: str | None = Field(None, description="The sender's BSUID when the webhook carries one.")


class StatusUpdate(BaseModel):
    """A delivery status of a message we sent: sent, delivered, read, failed, ..."""

    wamid: str
    status: str
    conversation_id: str
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


Record = InboundMessage | StatusUpdate | Unsupported


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
    s = _str(v)
    return s.strip().lstrip("+") or None if s is not None else None


def _contacts(value: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in _list(value.get("contacts")) if isinstance(c, dict)]


def _choose_identity(phone: str | None, user_id: str | None,
                     contacts: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """(conversation id, BSUID) — see the module docstring for the order."""
    if user_id is None and len(contacts) == 1:
        user_id = _str(contacts[0].get("user_id"))
    if phone is None and user_id is not None:
        for c in contacts:
            if _str(c.get("user_id")) == user_id:
                phone = _phone(c.get("wa_id"))
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
    if kind == "button":  # template quick-reply button
        b = _dict(msg.get("button"))
        return _str(b.get("text")) or _str(b.get("payload"))
    if kind == "interactive":
        i = _dict(msg.get("interactive"))
        sub = i.get("type")
        if sub in _INTERACTIVE_REPLIES:
            reply = _dict(i.get(sub))
            return _str(reply.get("title")) or _str(reply.get("id"))
    return None


def _errors(obj: dict[str, Any]) -> list[tuple[int | None, str]]:
    out: list[tuple[int | None, str]] = []
    for e in _list(obj.get("errors")):
        if not isinstance(e, dict):
            continue
        code = e.get("code")
        if isinstance(code, str) and code.isdigit():
            code = int(code)
        text = _str(e.get("message")) or _str(e.get("title")) or ""
        details = _str(_dict(e.get("error_data")).get("details")) or _str(e.get("details"))
        if details and details != text:
            text = f"{text} ({details})" if text else details
        out.append((code if isinstance(code, int) and not isinstance(code, bool) else None, text))
    return out


# --- records ------------------------------------------------------------------------------------------

def _message(msg: dict[str, Any], contacts: list[dict[str, Any]]) -> Record:
    wamid = _str(msg.get("id"))
    kind = _str(msg.get("type")) or "unknown"
    if wamid is None:
        return Unsupported(kind=kind, reason="message without an id")
    text = _text_of(msg)
    if text is None:
        errors = _errors(msg)
        why = f"{kind} messages are not chat turns" + (f" ({errors})" if errors else "")
        return Unsupported(kind=kind, wamid=wamid, reason=why)
    cid, user_id = _choose_identity(_phone(msg.get("from")), _str(msg.get("from_user_id")), contacts)
    bad = _invalid_id(cid)
    if bad is not None or cid is None:
        return Unsupported(kind=kind, wamid=wamid, reason=bad or "no id")
    ctx = _dict(msg.get("context"))
    return InboundMessage(wamid=wamid, conversation_id=cid, sender=cid, type=kind, text=text,
                          reply_to=_str(ctx.get("id")), timestamp=_timestamp(msg.get("timestamp")),
                          user_id=user_id)


def _status(st: dict[str, Any], contacts: list[dict[str, Any]]) -> Record:
    wamid = _str(st.get("id"))
    status = _str(st.get("status"))
    if wamid is None or status is None:
        return Unsupported(kind="status", wamid=wamid, reason="status without an id or a status")
    cid, _ = _choose_identity(_phone(st.get("recipient_id")), _str(st.get("recipient_user_id")), contacts)
    bad = _invalid_id(cid)
    if bad is not None or cid is None:
        return Unsupported(kind="status", wamid=wamid, reason=bad or "no id")
    return StatusUpdate(wamid=wamid, status=status, conversation_id=cid, errors=_errors(st))


def parse_webhook(body: Any) -> list[Record]:
    """Every record in a webhook body (already decoded from JSON), in order.

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
                out.append(_message(msg, contacts) if isinstance(msg, dict)
                           else Unsupported(kind="message", reason="message is not an object"))
            for st in _list(value.get("statuses")):
                out.append(_status(st, contacts) if isinstance(st, dict)
                           else Unsupported(kind="status", reason="status is not an object"))
            errors = _errors(value)
            if errors:
                out.append(Unsupported(kind="errors", reason=f"account/app error: {errors}"))
            if len(out) == before:
                out.append(Unsupported(kind=f"change:{field}", reason="nothing to do in this change"))
    return out


# --- authenticity -------------------------------------------------------------------------------------

def verify_signature(raw_body: bytes, header: str | None, app_secret: str) -> bool:
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
