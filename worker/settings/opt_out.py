"""A player's opt-out (WhatsApp): the phrases that stop everything business-initiated and start it again, and the
confirmations (docs/identity.md)."""

from __future__ import annotations

import json
from typing import Annotated, ClassVar

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from worker.settings.group import Group, split_commas

#: Several languages' words for "stop" (matched whole, normalised as reset phrases are: case and punctuation aside).
DEFAULT_OPT_OUT_PHRASES = ["stop", "unsubscribe", "stop all", "stopp", "arrêt", "arret", "désabonner", "abmelden",
                           "parar", "baja", "cancelar suscripción", "basta"]


class OptOut(Group):
    """A player's opt-out: an answered event, a timer, a template or an operator's message for them is applied with
    nothing sent until they opt in."""

    heading: ClassVar[str] = "Opt-out"
    phrases: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_OPT_OUT_PHRASES), validation_alias="opt_out_phrases",
        description="A player whose whole message is one of these (case and punctuation ignored, as reset phrases "
                    "are matched; inside a burst too) gets PARLEY_OPT_OUT_REPLY (no model call) and is opted out: "
                    "nothing business-initiated (an answered event, a timer, a template, an operator's message) is "
                    "sent to them; their own messages are still answered. Comma-separated or a JSON list; empty = off. "
                    "Default: stop, unsubscribe and their words in several languages.")
    in_phrases: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["start"], validation_alias="opt_in_phrases",
        description="A message that is one of these opts the player in again, answered with PARLEY_OPT_IN_REPLY.")
    until_message: bool = Field(default=True, validation_alias="opt_out_until_message",
                                description="Any later message of the player opts them in again (and is answered as "
                                            "usual); false: only PARLEY_OPT_IN_PHRASES do.")
    reply: str = Field(default="You won't get messages from us unless you write first. Send START to undo this.",
                       validation_alias="opt_out_reply", description="The one confirmation an opt-out gets.")
    in_reply: str = Field(default="Welcome back! You'll hear from us again.", validation_alias="opt_in_reply",
                          description="The answer to an opt-in phrase.")

    @field_validator("phrases", "in_phrases", mode="before")
    @classmethod
    def _split_phrases(cls, v: object) -> object:
        """A JSON list or comma-separated texts, as PARLEY_RESET_PHRASES."""
        if isinstance(v, str) and v.strip().startswith("["):
            return json.loads(v)
        return split_commas(v)
