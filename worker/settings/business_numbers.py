"""Several WhatsApp business numbers: their configuration and how a conversation names the number it is on.

``PARLEY_WHATSAPP_NUMBERS_FILE`` (YAML, or JSON when it ends in ``.json``)::

    numbers:
      - phone_number_id: "106540352242922"
        access_token: ${WA_TOKEN_MAIN}          # read from the environment, as the tools file's headers are
      - phone_number_id: "106540352242923"
        access_token: ${WA_TOKEN_QUIZ}
        system_prompt: You are the quiz master.  # optional: this number's system prompt
        tools_file: /etc/parley/quiz-tools.yaml  # optional: this number's own HTTP tools (beside the deployment's)

The *default* number is ``WHATSAPP_PHONE_NUMBER_ID`` when it is set (added from ``WHATSAPP_ACCESS_TOKEN`` when the
file does not list it), else the file's first entry. Conversation ids:

- on the default number: the player's id as today (``<wa_id>`` or the BSUID), so adding a second number to a
  deployment keeps every existing conversation;
- on any other number: ``<phone_number_id>.<player id>`` (:meth:`Numbers.address`). The same player on two numbers
  has two conversations.

The reply recipient is built the same way, so the number travels with the input (the envelope's ``recipient``)
into the reply record, and a deliverer that takes a reply over after a crash sends it from the right number with
that number's token (:meth:`Numbers.route`). A phone number has no dot and a BSUID's prefix is a country code
(``US.1349...``), never digits, so an all-digit prefix before the first dot always names a number.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SETTING = "PARLEY_WHATSAPP_NUMBERS_FILE"


@dataclass(frozen=True)
class Number:
    """A business number Parley answers from: its id, its access token (expanded), its own prompt and tools."""

    phone_number_id: str
    access_token: str = field(repr=False)
    system_prompt: str | None = None
    tools_file: str | None = None


@dataclass(frozen=True)
class Numbers:
    """The configured numbers, the default first."""

    default: Number
    others: tuple[Number, ...] = ()

    @property
    def all(self) -> tuple[Number, ...]:
        return (self.default, *self.others)

    def get(self, phone_number_id: str | None) -> Number | None:
        """The configured number of that id, or ``None``."""
        return next((n for n in self.all if n.phone_number_id == phone_number_id), None)

    def address(self, phone_number_id: str, player: str) -> str:
        """The conversation id (and reply recipient) of ``player`` writing to ``phone_number_id``."""
        return player if phone_number_id == self.default.phone_number_id else f"{phone_number_id}.{player}"

    def route(self, address: str) -> tuple[str, str]:
        """``(phone_number_id, player)`` of a conversation id or reply recipient made by :meth:`address`. The
        number may no longer be configured: the caller checks it with :meth:`get`."""
        return route(address, self.default.phone_number_id)


def route(address: str, default: str) -> tuple[str, str]:
    """``(phone_number_id, player)`` of ``address``: ``<digits>.<player>`` names a number, anything else (a phone
    number, a BSUID such as ``US.1349...``) is on ``default``."""
    prefix, dot, player = address.partition(".")
    if dot and player and prefix.isascii() and prefix.isdigit():
        return prefix, player
    return default, address
