"""WhatsApp webhook bodies -> records (pure: no I/O).

Meta batches several entries, changes, messages and statuses into one POST; every one is walked. Shapes
vary by API version and rollout (see ``shared/fixtures/whatsapp``): unknown message types become
:class:`Unsupported` records, never errors.

Identity: since 2026 webhooks carry business-scoped user ids (``from_user_id``, ``contacts[].user_id``,
``recipient_user_id``) and Meta may omit ``from``, ``wa_id`` and ``recipient_id`` for users with a username.
The conversation id is the phone number when the webhook has one, else the business-scoped id — so existing
phone-keyed conversations keep their id, and username-only users still get one. Replies go to the same value
(the sender sends BSUIDs as ``recipient``, phone numbers as ``to``).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from pydantic import BaseModel

from worker.errors import InvalidConversationIdError
from worker.store.keys import validate_conversation_id


class InboundMessage(BaseModel):
    """A user's message that becomes a chat turn."""

    wamid: str
    conversation_id: str
    type: str
    text: str
    reply_to: str | None = None
    timestamp: str | None = None


class StatusUpdate(BaseModel):
    """A delivery status of a message we sent: sent, delivered, read, failed, ..."""

    wamid: str
    conversation_id: str
    status: str
    errors: list[tuple[int | None, str]] = []


class Unsupported(BaseModel):
    """Something we do not turn into a turn (media, reactions, system messages, account errors)."""

    kind: str
    wamid: str | None = None
    reason: str = ""


Record = InboundMessage | StatusUpdate | Unsupported


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def _identity(*candidates: Any) -> str | None:
    for c in candidates:
        s = _str(c)
        if s is None:
            continue
        try:
            return validate_conversation_id(s.lstrip("+"))
        except InvalidConversationIdError:
            continue
    return None


def _contact_ids(value: dict[str, Any]) -> tuple[str | None, str | None]:
    contacts = value.get("contacts")
    if isinstance(contacts, list) and contacts and isinstance(contacts[0], dict):
        return _str(contacts[0].get("wa_id")), _str(contacts[0].get("user_id"))
    return None, None


def _text_of(msg: dict[str, Any]) -> str | None:
    kind = msg.get("type")
    if kind == "text":
        body = msg.get("text")
        return _str(body.get("body")) if isinstance(body, dict) else None
    if kind == "button":
        b = msg.get("button")
        return _str(b.get("text")) or _str(b.get("payload")) if isinstance(b, dict) else None
    if kind == "interactive":
        i = msg.get("interactive")
        if isinstance(i, dict):
            reply = i.get(str(i.get("type"))) or i.get("button_reply") or i.get("list_reply")
            if isinstance(reply, dict):
                return _str(reply.get("title")) or _str(reply.get("id"))
    return None


def _errors(obj: dict[str, Any]) -> list[tuple[int | None, str]]:
    out: list[tuple[int | None, str]] = []
    for e in obj.get("errors") or ():
        if isinstance(e, dict):
            code = e.get("code")
            details = e.get("error_data", {}).get("details") if isinstance(e.get("error_data"), dict) else None
            text = _str(e.get("message")) or _str(e.get("title")) or ""
            out.append((code if isinstance(code, int) else None, f"{text} {details or ''}".strip()))
    return out


def parse_webhook(body: Any) -> list[Record]:
    """Every record in a webhook body, in order. Raises ``ValueError`` when the body is not a webhook at all."""
    if not isinstance(body, dict) or not isinstance(body.get("entry"), list):
        raise ValueError("not a WhatsApp webhook body (no entry list)")
    out: list[Record] = []
    for entry in body["entry"]:
        changes = entry.get("changes") if isinstance(entry, dict) else None
        for change in changes or ():
            value = change.get("value") if isinstance(change, dict) else None
            if not isinstance(value, dict):
                out.append(Unsupported(kind="change", reason="no value"))
                continue
            wa_id, user_id = _contact_ids(value)
            for msg in value.get("messages") or ():
                if not isinstance(msg, dict):
                    continue
                out.append(_message(msg, wa_id, user_id))
            for st in value.get("statuses") or ():
                if not isinstance(st, dict):
                    continue
                cid = _identity(st.get("recipient_id"), wa_id, st.get("recipient_user_id"), user_id)
                wamid = _str(st.get("id"))
                if cid is None or wamid is None:
                    out.append(Unsupported(kind="status", wamid=wamid, reason="no usable recipient or id"))
                    continue
                out.append(StatusUpdate(wamid=wamid, conversation_id=cid, status=str(st.get("status", "")),
                                        errors=_errors(st)))
            if value.get("errors") and not value.get("messages") and not value.get("statuses"):
                out.append(Unsupported(kind="errors", reason=str(_errors(value))))
    return out


def _message(msg: dict[str, Any], wa_id: str | None, user_id: str | None) -> Record:
    wamid = _str(msg.get("id"))
    kind = str(msg.get("type", "unknown"))
    cid = _identity(msg.get("from"), wa_id, msg.get("from_user_id"), user_id)
    if wamid is None or cid is None:
        return Unsupported(kind=kind, wamid=wamid, reason="no usable sender or message id")
    text = _text_of(msg)
    if text is None:
        return Unsupported(kind=kind, wamid=wamid, reason=f"{kind} messages are not chat turns")
    ctx = msg.get("context")
    reply_to = _str(ctx.get("id")) if isinstance(ctx, dict) else None
    return InboundMessage(wamid=wamid, conversation_id=cid, type=kind, text=text, reply_to=reply_to,
                          timestamp=_str(msg.get("timestamp")))


def verify_signature(raw_body: bytes, header: str | None, app_secret: str) -> bool:
    """``X-Hub-Signature-256`` is ``sha256=`` + the hex HMAC-SHA256 of the raw body with the app secret.
    Compared in constant time; the raw bytes, never a re-serialisation of the parsed JSON."""
    if not header or not header.startswith("sha256=") or not app_secret:
        return False
    expected = hmac.new(app_secret.encode(), raw_body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, header[len("sha256="):].strip().lower())


def verify_handshake(mode: str | None, token: str | None, challenge: str | None, verify_token: str) -> str | None:
    """The challenge to echo when the subscription handshake is valid, else ``None``."""
    if mode == "subscribe" and token is not None and verify_token and hmac.compare_digest(token, verify_token):
        return challenge or ""
    return None
