"""The business number of a webhook change, with one number or several configured
(:mod:`worker.settings.business_numbers`).

Each change names the number it is for (``value.metadata.phone_number_id``). Its records are moved onto that
number's conversations (:meth:`~worker.settings.business_numbers.Numbers.address`: the default number's ids are unchanged); a
change for a number that is not configured is refused record by record (:data:`UNKNOWN_NUMBER`, counted by the
ingress as ``unknown_number`` and answered 200: Meta's retries would not make it known), and counted as a skipped
change (:func:`skipped_changes`). Meta sends a business account's webhooks for all its numbers (the test number every
account starts with included), so a deployment serving one number meets the others' too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from worker.envelopes.addresses import validate_conversation_id
from worker.errors import InvalidConversationIdError
from worker.ingress.inbound import (
    IdentityChange,
    InboundEvent,
    InboundMessage,
    InboundNotice,
    MarketingPreference,
    Record,
    StatusUpdate,
    Unsupported,
)
from worker.ingress.webhook_fields import as_dict, as_list
from worker.settings.business_numbers import SETTING, Numbers

#: The ``kind`` of the :class:`~worker.ingress.inbound.Unsupported` record that stands for a message or status sent
#: to a number that is not configured.
UNKNOWN_NUMBER = "unknown_number"


def business_number(value: dict[str, Any]) -> str | None:
    """The phone number id a change is for (``metadata.phone_number_id``), or ``None``."""
    metadata = value.get("metadata")
    pnid = metadata.get("phone_number_id") if isinstance(metadata, dict) else None
    return pnid if isinstance(pnid, str) and pnid else None


@dataclass(frozen=True)
class SkippedChange:
    """A change whose messages and statuses are not applied: ``reason`` ``unknown_number`` (a number the deployment
    does not serve) or ``no_number`` (it names none); ``phone_number_id`` the number it names."""

    reason: str
    phone_number_id: str | None


def skipped_changes(body: Any, numbers: Numbers) -> list[SkippedChange]:
    """The changes of a webhook body (decoded) that carry messages or statuses for a number ``numbers`` does not
    hold: :func:`on_number` refuses their records, the rest of the POST is applied."""
    out: list[SkippedChange] = []
    for entry in as_list(as_dict(body).get("entry")):
        for change in as_list(as_dict(entry).get("changes")):
            value = as_dict(as_dict(change).get("value"))
            if not (as_list(value.get("messages")) or as_list(value.get("statuses"))):
                continue
            pnid = business_number(value)
            if numbers.get(pnid) is None:
                out.append(SkippedChange("no_number" if pnid is None else UNKNOWN_NUMBER, pnid))
    return out


def on_number(records: list[Record], pnid: str | None, numbers: Numbers) -> list[Record]:
    """``records`` (of one change) moved onto number ``pnid``'s conversations, or refused when it is unknown."""
    if numbers.get(pnid) is None:
        why = f"business number {pnid or '(none named)'} is not configured in {SETTING}"
        return [r if isinstance(r, Unsupported) else Unsupported(kind=UNKNOWN_NUMBER, wamid=getattr(r, "wamid", None), reason=why)
                for r in records]
    if pnid is None or pnid == numbers.default.phone_number_id:
        return records
    out: list[Record] = []
    for r in records:
        if isinstance(r, StatusUpdate) and r.reply_id is not None:
            out.append(r)  # its callback data names the conversation already
        elif isinstance(r, InboundMessage | InboundNotice | InboundEvent | StatusUpdate):
            cid = numbers.address(pnid, r.conversation_id)
            try:
                validate_conversation_id(cid)
            except InvalidConversationIdError as exc:
                out.append(Unsupported(kind=getattr(r, "type", "status"), wamid=r.wamid,
                                       reason=f"invalid conversation id: {exc}"))
                continue
            update = {"conversation_id": cid, **_ids_on(r.phone, r.user_id, pnid, numbers)}
            if isinstance(r, InboundMessage | InboundNotice):
                update["sender"] = numbers.address(pnid, r.sender)
            out.append(r.model_copy(update=update))
        elif isinstance(r, IdentityChange):
            out.append(r.model_copy(update={"old": numbers.address(pnid, r.old), "new": numbers.address(pnid, r.new)}))
        elif isinstance(r, MarketingPreference):
            out.append(r.model_copy(update=_ids_on(r.phone, r.user_id, pnid, numbers)))
        else:
            out.append(r)
    return out


def _ids_on(phone: str | None, user_id: str | None, pnid: str, numbers: Numbers) -> dict[str, str | None]:
    """A player's ids as they are on number ``pnid`` (the identity links are per number, like conversations)."""
    return {"phone": numbers.address(pnid, phone) if phone else None,
            "user_id": numbers.address(pnid, user_id) if user_id else None}
