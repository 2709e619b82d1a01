"""How replies leave: delivery's retries and crash recovery, and the WhatsApp Cloud API they go through."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from worker.settings.group import STANDARD, Group, split_commas


class Delivery(Group):
    """How replies leave: where to, how often a send is retried, what a crash in the middle of one means."""

    heading: ClassVar[str] = "Delivery"
    typing_indicator: bool = Field(default=True, description="Mark a player's messages read and show WhatsApp's typing "
                                   "indicator while a burst waits and the model thinks (refreshed for slow turns).")
    max_attempts: int = Field(default=8, validation_alias="delivery_max_attempts", description="Failed sends of one reply "
                              "(throttling, 5xx) before it is dead-lettered; counted in Redis with the reply, "
                              "whichever worker sends it.")
    part_interval: float = Field(default=0.0, validation_alias="delivery_part_interval",
                                 description="Seconds between the parts of one split reply.")
    status_webhooks: Literal["auto"] | bool = Field(
        default="auto", description="Whether a webhook ingress records WhatsApp's status webhooks (Meta's webhook subscribes "
                            "to `messages` and the `webhook` process runs). Then a reply part a crashed worker left "
                            "in flight is resent only when no status shows it reached WhatsApp within "
                            "PARLEY_RESEND_GRACE_SECONDS; false: it is resent at once (it may reach the player "
                            "twice). auto: true while an ingress says so in Redis (it does when it starts and as "
                            "statuses come; the word holds a day).")
    resend_grace_seconds: float = Field(default=10.0, ge=0, description="With PARLEY_STATUS_WEBHOOKS: how long a reply part "
                                        "found in flight after a crash waits for a status webhook before it is "
                                        "resent (no worker waits meanwhile: the delivery checks again later).")
    deliver_inline: bool = Field(default=True, description="Deliver a drain's last reply in the drain task itself (one "
                                 "Celery hop fewer per turn); false hands every reply to a parley.deliver task.")
    reply_webhook_url: str | None = Field(default=None, description="Deliver replies as JSON POSTs here instead of WhatsApp.")

    @property
    def statuses(self) -> bool | None:
        """Whether status webhooks are recorded; None: whenever an ingress says so in Redis (``auto``)."""
        return None if self.status_webhooks == "auto" else self.status_webhooks

    @property
    def resend_grace_ms(self) -> int:
        return int(self.resend_grace_seconds * 1000)


class WhatsApp(Group):
    """The WhatsApp Cloud API: the sender number, its window, its template and its pace."""

    heading: ClassVar[str] = "WhatsApp"
    api_base_url: str = Field(default="https://graph.facebook.com/v21.0", validation_alias="whatsapp_api_base_url",
                              json_schema_extra=STANDARD, description="WhatsApp Cloud API base URL.")
    phone_number_id: str | None = Field(default=None, validation_alias="whatsapp_phone_number_id", json_schema_extra=STANDARD,
                                        description="Sender phone number id. WhatsApp is off when unset.")
    access_token: SecretStr | None = Field(default=None, validation_alias="whatsapp_access_token", json_schema_extra=STANDARD,
                                           description="Cloud API access token.")
    app_secret: SecretStr | None = Field(default=None, validation_alias="whatsapp_app_secret", json_schema_extra=STANDARD,
                                         description="App secret for X-Hub-Signature-256 on webhooks.")
    verify_token: SecretStr | None = Field(default=None, validation_alias="whatsapp_verify_token", json_schema_extra=STANDARD,
                                           description="Token for the webhook verification handshake.")
    window_hours: float = Field(default=24.0, ge=0, validation_alias="whatsapp_window_hours", description="WhatsApp's "
                                "customer-service window: free-form replies go only this long after the player's last "
                                "message; later ones go as PARLEY_WHATSAPP_TEMPLATE or are dead-lettered "
                                "(outside_window) before any API call. 0 = not checked before sending (a 131047 "
                                "answer still is).")
    template: str | None = Field(default=None, validation_alias="whatsapp_template", description="Approved template sent "
                                 "instead of a reply outside the window (the rest of the reply, once). Unset: such "
                                 "replies are dead-lettered.")
    template_language: str = Field(default="en_US", validation_alias="whatsapp_template_language",
                                   description="Language code the template was approved in.")
    template_parameter: Literal["reply", "fixed", "none"] = Field(
        default="reply", validation_alias="whatsapp_template_parameter", description="How the template's one body parameter "
        "is filled: reply (the reply's text on one line, cut to 1,024 characters), fixed "
        "(PARLEY_WHATSAPP_TEMPLATE_TEXT), none (no parameter).")
    template_text: str = Field(default="", validation_alias="whatsapp_template_text", description="The parameter's text with "
                               "PARLEY_WHATSAPP_TEMPLATE_PARAMETER=fixed.")
    template_header_image: str | None = Field(default=None, pattern=r"^https://\S+$", validation_alias="whatsapp_template_header_image",
                                              description="Link (https) of the image in the template's header, for a "
                                              "template approved with an image header. Unset: no header.")
    template_more_parameters: list[str] = Field(default_factory=list, validation_alias="whatsapp_template_more_parameters",
                                                description='Fixed texts of the body parameters after the first, as a '
                                                'JSON list, e.g. ["Harrogate", "3 clues left"]. Empty: none.')
    # NoDecode: a comma list, as a person writes it, not JSON.
    template_quick_replies: Annotated[list[str], NoDecode] = Field(
        default_factory=list, validation_alias="whatsapp_template_quick_replies", description="Payloads of the "
        "template's quick-reply buttons, in order, comma-separated (handed back when the player taps one). Empty: the "
        "template has no quick-reply buttons.")
    reply_tools: bool = Field(default=True, validation_alias="whatsapp_reply_tools", description="Offer the model the "
                              "reply tools (send_image, send_location, request_location, send_buttons, send_list, "
                              "react) on the WhatsApp channel.")
    messages_per_second: float = Field(default=80.0, ge=0, validation_alias="whatsapp_messages_per_second", description="Messages "
                                       "a second the sender number may send, shared by every worker through Redis "
                                       "(Meta's default throughput; higher tiers allow up to 1,000, and inbound "
                                       "messages count towards it too). 0 = off.")
    burst: int = Field(default=10, ge=1, validation_alias="whatsapp_burst", description="Messages the sender number may send "
                       "at once after a quiet spell, within its rate.")
    recipient_per_minute: float = Field(default=10.0, ge=0, validation_alias="whatsapp_recipient_per_minute", description="Messages "
                                        "a minute to one player (Meta's pair rate is about one every 6 seconds; 131056 "
                                        "above it), shared by every worker and conversation writing to them. 0 = off.")
    recipient_burst: int = Field(default=20, ge=1, validation_alias="whatsapp_recipient_burst", description="Messages one player "
                                 "may get at once after a quiet spell (Meta allows bursts of up to about 45), within "
                                 "the pair rate.")
    pace_max_sleep: float = Field(default=2.0, ge=0, validation_alias="whatsapp_pace_max_sleep", description="Longest wait for "
                                  "the pace a worker sleeps through; a longer one hands the reply to a later delivery "
                                  "task, holding no worker meanwhile.")
    numbers_file: str | None = Field(default=None, validation_alias="whatsapp_numbers_file", description="YAML or JSON "
                                     "file of several business numbers (`numbers: [{phone_number_id, access_token, "
                                     "system_prompt, tools_file}]`, `${VAR}` read from the environment): replies go "
                                     "from the number the player wrote to, paced per number. See docs/whatsapp.md.")

    @property
    def window_seconds(self) -> float:
        return self.window_hours * 3600

    @property
    def recipient_per_second(self) -> float:
        return self.recipient_per_minute / 60

    @field_validator("template_quick_replies", mode="before")
    @classmethod
    def _split_quick_replies(cls, v: object) -> object:
        return split_commas(v)

    @model_validator(mode="after")
    def _template_text(self) -> WhatsApp:
        if self.template and self.template_parameter == "fixed" and not self.template_text:
            raise ValueError("PARLEY_WHATSAPP_TEMPLATE_PARAMETER=fixed needs PARLEY_WHATSAPP_TEMPLATE_TEXT")
        return self
