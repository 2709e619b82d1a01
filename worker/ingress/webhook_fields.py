"""Readers of a webhook's untrusted JSON (never trust a type: a wrong one reads as absent) and the choice of a
record's conversation id (the order is in :mod:`worker.ingress.parse`'s docstring)."""

from __future__ import annotations

import math
from typing import Any

from worker.envelopes.addresses import validate_conversation_id
from worker.errors import InvalidConversationIdError


def as_str(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def as_dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def as_timestamp(v: Any) -> str | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return str(v)
    return as_str(v)


def as_phone(v: Any) -> str | None:
    text = as_str(v)
    return text.strip().lstrip("+") or None if text is not None else None


def contacts_of(value: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in as_list(value.get("contacts")) if isinstance(c, dict)]


def choose_identity(phone: str | None, user_id: str | None,
                     contacts: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """(conversation id, BSUID) — see the module docstring for the order."""
    phone, user_id = identities(phone, user_id, contacts)
    return phone or user_id, user_id


def identities(phone: str | None, user_id: str | None,
               contacts: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """(phone number, BSUID) of a record: its own, else what the webhook's contacts say of the same player."""
    if user_id is None and len(contacts) == 1:
        user_id = as_str(contacts[0].get("user_id"))
    if phone is None and user_id is not None:
        for contact in contacts:
            if as_str(contact.get("user_id")) == user_id:
                phone = as_phone(contact.get("wa_id"))
                break
    if phone is None and user_id is None and len(contacts) == 1:
        phone = as_phone(contacts[0].get("wa_id"))
    return phone, user_id


def invalid_id(cid: str | None) -> str | None:
    """Why ``cid`` cannot be a conversation id, or ``None`` when it can."""
    if cid is None:
        return "no sender or recipient id (neither phone number nor business-scoped id)"
    try:
        validate_conversation_id(cid)
    except InvalidConversationIdError as exc:
        return f"invalid conversation id: {exc}"
    return None


def errors_of(obj: dict[str, Any]) -> list[tuple[int | None, str]]:
    out: list[tuple[int | None, str]] = []
    for error in as_list(obj.get("errors")):
        if not isinstance(error, dict):
            continue
        code = error.get("code")
        if isinstance(code, str) and code.isdigit():
            code = int(code)
        text = as_str(error.get("message")) or as_str(error.get("title")) or ""
        details = as_str(as_dict(error.get("error_data")).get("details")) or as_str(error.get("details"))
        if details and details != text:
            text = f"{text} ({details})" if text else details
        out.append((code if isinstance(code, int) and not isinstance(code, bool) else None, text))
    return out


# --- records ------------------------------------------------------------------------------------------


def as_number(v: Any) -> float | None:
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


def coordinate(v: float) -> str:
    # Five decimals are about a metre: enough for a game's map, and no float noise (37.44221496582).
    return f"{v:.5f}".rstrip("0").rstrip(".")
