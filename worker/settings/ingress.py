"""The ways in: the webhook ingress, the photos it fetches, and the producers' API and inlet."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from worker.settings.group import Group, split_commas


class PhotoLimits(Group):
    """Photos players send, fetched for a model that reads images."""

    heading: ClassVar[str] = "Photos"
    max_bytes: int = Field(default=5 * 1024 * 1024, gt=0, validation_alias="media_max_bytes", description="Largest image "
                           "fetched from the Cloud API for the model; larger ones are refused and answered with "
                           "unsupported_reply.")
    turn_max_bytes: int = Field(default=8 * 1024 * 1024, gt=0, validation_alias="media_turn_max_bytes", description="Bytes "
                                "of photos one turn may fetch and hold (a burst may carry many); the photos past it "
                                "are not fetched and the model reads that a photo came that could not be loaded.")
    # NoDecode: a comma list, as a person writes it, not JSON.
    hosts: Annotated[list[str], NoDecode] = Field(default=["lookaside.fbsbx.com"], min_length=1, validation_alias="media_hosts",
                                                  description="Hosts a photo is downloaded from (the access token "
                                                  "goes with the download), comma-separated; `*.example.com` for "
                                                  "subdomains. Over https only; any other host is refused.")
    allow_http: bool = Field(default=False, validation_alias="media_allow_http", description="Tests only: let photo downloads "
                             "use plain http to a loopback address (a local stand-in for Meta). Never to any other "
                             "address.")

    @field_validator("hosts", mode="before")
    @classmethod
    def _split_hosts(cls, v: object) -> object:
        """``lookaside.fbsbx.com, *.example.com`` -> a list of host names."""
        return split_commas(v)


class Webhook(Group):
    """What the webhook ingress accepts from WhatsApp, and the short answers it gives at once."""

    heading: ClassVar[str] = "The webhook ingress"
    location_as: Literal["event", "turn"] = Field(default="turn", description="A shared location pin becomes a chat "
                                                  "turn (answered: the player may be answering a location request), "
                                                  "or with `event` is added without a reply (the model knows where the "
                                                  "player is on its next turn). Either way the model reads the pin as "
                                                  "the player's words, never as a game event.")
    unsupported_reply: str = Field(default="Sorry, I can only read text messages, locations and photos.",
                                   description="Short answer to a voice note, video, document, sticker, contact, "
                                               "unsupported or unknown message (and a photo the model cannot read "
                                               "that has no caption).")
    refused_reply: str = Field(default="Sorry, I couldn't read that message: it is too long. Please send a shorter one.",
                               description="Short answer to a player's message Parley must refuse as it is (text "
                                           "over PARLEY_MAX_INPUT_CHARS, a location whose name is as long, a "
                                           "character that cannot be stored); empty = none (the message is dropped, "
                                           "counted).")
    max_age_seconds: float = Field(default=3 * 86400.0, ge=0, validation_alias="webhook_max_age_seconds", description="The "
                                   "webhook ingress refuses (200, counted as too_old, not applied) a message or status "
                                   "whose timestamp is older than this, so a captured signed webhook cannot be "
                                   "replayed once its message id left the dedupe memory. Above Meta's retry period "
                                   "(about 36 hours), at most PARLEY_DEDUPE_SECONDS; 0 = off.")
    max_body_bytes: int = Field(default=8 * 1024 * 1024, gt=0, validation_alias="webhook_max_body_bytes", description="Largest "
                                "webhook body the ingress reads (413 past it, checked while reading).")


class Producers(Group):
    """The producers' API over HTTP and the inlet (docs/producers.md)."""

    heading: ClassVar[str] = "The producers' API over HTTP and the inlet"
    api_tokens: SecretStr | None = Field(default=None, description="Bearer tokens of the producers' HTTP API under /v1/ "
                                         "on the webhook process, comma-separated: `token` (scope producer: queue "
                                         "inputs, read a summary) or `operator:token` (also delete). Several tokens "
                                         "let producers rotate them. Unset or empty (and no PARLEY_API_TOKENS_FILE): "
                                         "the API is off (404).")
    api_tokens_file: str | None = Field(default=None, description="YAML or JSON file of more API tokens, each "
                                        "`{token (${VAR} read from the environment), name, scope (producer or "
                                        "operator), numbers, conversation_prefixes, per_second}`: a token limited "
                                        "to numbers or prefixes gets 404 for any other conversation and 422 for a "
                                        "recipient outside them; past per_second (counted over every ingress "
                                        "process) 429 with Retry-After. Adds to PARLEY_API_TOKENS; read again "
                                        "within a second of a change (a bad change keeps the last good tokens). "
                                        "See docs/security.md.")
    inlet_stream: str = Field(default="parley:inlet", min_length=1, description="Redis stream `parley inlet` consumes: "
                              "each entry one field `envelope` holding the JSON of a queue message (docs/producers.md).")
    inlet_group: str = Field(default="parley-inlet", min_length=1, description="The inlet's consumer group on "
                             "PARLEY_INLET_STREAM (every inlet process of a deployment joins it).")
    inlet_queue: str = Field(default="parley.inlet", min_length=1, description="Durable RabbitMQ queue the inlet also "
                             "consumes when the broker is RabbitMQ.")
    inlet_batch: int = Field(default=100, ge=1, description="Stream entries one inlet reads at a time.")
    inlet_claim_idle_seconds: float = Field(default=30.0, gt=0, description="An entry another inlet read and left "
                                            "unacknowledged this long (it crashed, or its mailbox was full) is "
                                            "claimed and tried again.")
    inlet_retry_budget: int = Field(default=1000, ge=1, description="Held stream entries (their mailbox was full, "
                                    "or an older entry of their conversation was pending) one inlet tries again per "
                                    "round at most, only of conversations whose mailbox has room: a flood from one "
                                    "player costs each round this much, however many of its entries wait.")
    inlet_dead_max: int = Field(default=10_000, ge=1, description="Most entries the inlet's dead letters keep: "
                                "`<stream>:dead` is trimmed to about this many (the oldest go), the RabbitMQ "
                                "`<queue>.dead` drops its oldest past it (`x-max-length`).")
    inlet_dead_max_age_seconds: float = Field(default=2 * 86400.0, gt=0, description="Oldest an inlet dead letter is "
                                              "kept: older entries of `<stream>:dead` are trimmed as new ones come, "
                                              "`<queue>.dead` expires them (`x-message-ttl`). At most "
                                              "PARLEY_DELETE_TOMBSTONE_SECONDS, so a deleted conversation's "
                                              "tombstone outlives its dead letters (a replay is refused by it). The "
                                              "inlet's stream itself loses each entry once acknowledged.")
