"""What one bearer token of the producers' API may reach: its role, and the conversations it is limited to.

``PARLEY_API_TOKENS`` gives tokens that reach every conversation; ``PARLEY_API_TOKENS_FILE`` (YAML, or JSON when it
ends in ``.json``) may limit each one::

    tokens:
      - token: ${GAME_A_TOKEN}             # read from the environment
        name: game-a                       # optional: shown in the logs and the request's span
        scope: producer                    # or operator
        conversation_prefixes: ["game-a:"] # optional: only conversation ids that start with one of these
        numbers: ["106540352242923"]       # optional: only conversations on these business numbers
        per_second: 20                     # optional: requests a second, counted over the whole fleet

A conversation's business number is the one its id names (:func:`worker.settings.business_numbers.route`:
``<phone_number_id>.<player>``, else the default number), known before its first message; with no business number
configured none is known, and a token limited to numbers reaches nothing. Both limits given: a conversation must
pass both.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

TOKENS_FILE = "PARLEY_API_TOKENS_FILE"

Role = Literal["producer", "operator"]


@dataclass(frozen=True)
class Grant:
    """One configured token: ``role`` what it may do (``producer`` or ``operator``), ``numbers`` and ``prefixes``
    which conversations (``None``: no limit of that kind), ``per_second`` how often (``None``: no limit)."""

    token: bytes = field(repr=False)
    role: Role
    name: str
    numbers: frozenset[str] | None = None
    prefixes: tuple[str, ...] | None = None
    per_second: float | None = None

    def allows(self, conversation_id: str, number: str | None) -> bool:
        """Whether the token reaches ``conversation_id`` (or a reply ``recipient``), on business number ``number``
        (``None``: not known). The one place a token's reach is decided."""
        if self.prefixes is not None and not conversation_id.startswith(self.prefixes):
            return False
        return self.numbers is None or (number is not None and number in self.numbers)

    @property
    def limited(self) -> bool:
        """Whether the token reaches only some conversations (its numbers or id prefixes)."""
        return self.prefixes is not None or self.numbers is not None

    @property
    def digest(self) -> str:
        """What names the token where it must not be written (its rate counter in Redis)."""
        return hashlib.sha256(self.token).hexdigest()[:32]
