"""One channel over several WhatsApp business numbers: each reply goes from the number its recipient names.

A recipient made by :meth:`worker.settings.business_numbers.Numbers.address` (``<phone_number_id>.<player>``, or the bare player id
on the default number) picks the number's :class:`~worker.channels.whatsapp.WhatsAppSender`: its URL
(``{base}/{phone_number_id}/messages``) and its token. Each number has its own
:class:`~worker.channels.token.TokenHealth` (:func:`number_token`, which its photo fetcher shares), so a rejected
token holds only that number's replies, with that number's backoff and gauge series: the others go on; each
number's sender keeps its own pace (its throughput, its pair rate with each player). Photos a
player sends are fetched with the token of the number they wrote to (:func:`fetcher_for`).
A recipient naming a number that is no longer configured is refused for good
(:class:`~worker.errors.DeliveryPermanentError`: dead-lettered with the reason, never sent from another number).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from worker.channels.channel import Sent, always
from worker.channels.token import TokenHealth, for_number
from worker.channels.whatsapp import WhatsAppSender
from worker.envelopes.reply_parts import OutPart
from worker.errors import DeliveryPermanentError
from worker.settings.business_numbers import SETTING, Number, Numbers

MakeSender = Callable[[Number, TokenHealth], WhatsAppSender]
F = TypeVar("F")


def number_token(numbers: Numbers, number: Number) -> TokenHealth:
    """The process's token state of ``number``, named as the operator fixes it."""
    name = ("WHATSAPP_ACCESS_TOKEN" if number is numbers.default
            else f"the access_token of number {number.phone_number_id} in {SETTING}")
    return for_number(number.phone_number_id, name=name)


def fetcher_for(numbers: Numbers, make: Callable[[Number, TokenHealth], F]) -> Callable[[str], F | None]:
    """``cid -> `` the photo fetcher of the number conversation ``cid`` is on (made by ``make`` once per number,
    with that number's token), or ``None`` for a number no longer configured."""
    fetchers = {n.phone_number_id: make(n, number_token(numbers, n)) for n in numbers.all}
    return lambda cid: fetchers.get(numbers.route(cid)[0])


class NumbersChannel:
    """A :class:`~worker.channels.channel.WindowedChannel` with read receipts, over one sender per number."""

    def __init__(self, numbers: Numbers, make: MakeSender) -> None:
        self.numbers = numbers
        self.senders = {n.phone_number_id: make(n, number_token(numbers, n)) for n in numbers.all}
        self.phone_number_id = numbers.default.phone_number_id

    def sender_for(self, recipient: str) -> tuple[WhatsAppSender, str]:
        """The sender of the number ``recipient`` is on, and the player's own id to address."""
        pnid, player = self.numbers.route(recipient)
        sender = self.senders.get(pnid)
        if sender is None:
            raise DeliveryPermanentError(f"business number {pnid} is not configured in {SETTING} (any more): "
                                         "the reply is not sent from another number")
        return sender, player

    def send_text(self, recipient: str, text: str, *, reply_to: str | None = None,
                  callback_data: str | None = None) -> str:
        sender, player = self.sender_for(recipient)
        return sender.send_text(player, text, reply_to=reply_to, callback_data=callback_data)

    def send_reply(self, recipient: str, parts: Sequence[OutPart], *, reply_to: str | None,
                   last_inbound: float | None, callback_data: str | None = None,
                   templates: Callable[[], bool] = always) -> Sent:
        sender, player = self.sender_for(recipient)
        return sender.send_reply(player, parts, reply_to=reply_to, last_inbound=last_inbound,
                                 callback_data=callback_data, templates=templates)

    def mark_read(self, message_id: str, *, typing: bool) -> None:
        """A receipt without its conversation goes through the default number (see :meth:`mark_read_for`)."""
        self.senders[self.phone_number_id].mark_read(message_id, typing=typing)

    def mark_read_for(self, conversation_id: str, message_id: str, *, typing: bool) -> None:
        """The receipt of a message of ``conversation_id``, through the number the player wrote to."""
        sender = self.senders.get(self.numbers.route(conversation_id)[0])
        if sender is not None:
            sender.mark_read(message_id, typing=typing)

    def close(self) -> None:
        for sender in self.senders.values():
            sender.close()
