"""Every setting in one place, read from the environment (and a ``.env`` file when present).

Standard names where the ecosystem has them (``REDIS_URL``, ``OPENAI_API_KEY``, ``WHATSAPP_ACCESS_TOKEN``,
...); everything else under ``PARLEY_``. ``parley config`` prints the table docs/configuration.md is generated from.

The settings come in groups, each a small frozen object a component takes as it is (as httpx's ``Timeout`` and
``Limits`` are): :class:`Redis`, :class:`Broker`, :class:`Llm`, :class:`Tooling`, :class:`Memory`, :class:`Store`,
:class:`Drain`, :class:`Burst`, :class:`PhotoLimits`, :class:`Webhook`, :class:`Producers`, :class:`Delivery`, :class:`WhatsApp`,
:class:`Record`, :class:`Budget`, :class:`Observability`, :class:`GameContext` and :class:`OptOut`. A knob is declared once, in its group; a unit a component
wants (milliseconds, a flag) is a property of the group. The environment stays flat: a field's variable is
``PARLEY_`` + its flat name (the field's ``validation_alias``, else its name), or a standard name, and
``Settings(lease_seconds=5)`` takes the same flat names.

The groups live by wing (:mod:`.store`, :mod:`.model`, :mod:`.drain`, :mod:`.ingress`, :mod:`.delivery`,
:mod:`.observability`), the flat names and the environment sources in :mod:`.flat_names`; this module is the one
``Settings`` and re-exports every group.
"""

from __future__ import annotations

import warnings
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from worker.settings.delivery import Delivery, WhatsApp
from worker.settings.drain import Burst, Drain
from worker.settings.flat_names import FLAT, GROUPS, ROUTE, Regrouped, by_variable, env_name, grouped, knobs
from worker.settings.ingress import PhotoLimits, Producers, Webhook
from worker.settings.model import Budget, CompactionStep, GameContext, Llm, Memory, Tooling
from worker.settings.observability import Observability
from worker.settings.opt_out import OptOut
from worker.settings.store import Broker, Record, Redis, Store

__all__ = [
    "GROUPS",
    "Broker",
    "Budget",
    "Burst",
    "CompactionStep",
    "Delivery",
    "Drain",
    "GameContext",
    "Llm",
    "Memory",
    "Observability",
    "OptOut",
    "PhotoLimits",
    "Producers",
    "Record",
    "Redis",
    "Settings",
    "Store",
    "Tooling",
    "Webhook",
    "WhatsApp",
    "env_name",
    "get_settings",
    "knobs",
]


class Settings(BaseSettings):
    """Parley's configuration: one group per concern. Field descriptions are the documentation
    (docs/configuration.md)."""

    model_config = SettingsConfigDict(env_prefix="PARLEY_", env_file=".env", extra="ignore")

    redis: Redis = Field(default_factory=lambda: Redis())
    broker: Broker = Field(default_factory=lambda: Broker())
    llm: Llm = Field(default_factory=lambda: Llm())
    tooling: Tooling = Field(default_factory=lambda: Tooling())
    memory: Memory = Field(default_factory=lambda: Memory())
    store: Store = Field(default_factory=lambda: Store())
    drain: Drain = Field(default_factory=lambda: Drain())
    burst: Burst = Field(default_factory=lambda: Burst())
    media: PhotoLimits = Field(default_factory=lambda: PhotoLimits())
    webhook: Webhook = Field(default_factory=lambda: Webhook())
    producers: Producers = Field(default_factory=lambda: Producers())
    delivery: Delivery = Field(default_factory=lambda: Delivery())
    whatsapp: WhatsApp = Field(default_factory=lambda: WhatsApp())
    record: Record = Field(default_factory=lambda: Record())
    budget: Budget = Field(default_factory=lambda: Budget())
    observability: Observability = Field(default_factory=lambda: Observability())
    game_context: GameContext = Field(default_factory=lambda: GameContext())
    opt_out: OptOut = Field(default_factory=lambda: OptOut())

    def __init__(self, **values: Any) -> None:
        """Takes a group (``burst=Burst(...)``) or a setting by its flat name (``burst_quiet_seconds=2``), as the
        environment names it without PARLEY_; ``_env_file=None`` reads no ``.env``."""
        # An empty group is validated by the settings' own validator; a default_factory would build the group's.
        try:
            super().__init__(**{**{group: {} for group in GROUPS}, **grouped(values)})
        except ValidationError as exc:
            raise by_variable(exc) from None

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        assert isinstance(dotenv_settings, DotEnvSettingsSource)
        env = EnvSettingsSource(FLAT)
        dotenv = DotEnvSettingsSource(FLAT, env_file=dotenv_settings.env_file,
                                      env_file_encoding=dotenv_settings.env_file_encoding)
        return init_settings, Regrouped(settings_cls, env), Regrouped(settings_cls, dotenv)

    @model_validator(mode="after")
    def _webhook_age(self) -> Settings:
        # Past the dedupe memory a replayed message id is new again: only the age check would still refuse it.
        if self.webhook.max_age_seconds > self.store.dedupe_seconds:
            raise ValueError(f"PARLEY_WEBHOOK_MAX_AGE_SECONDS ({self.webhook.max_age_seconds:g}) must not exceed "
                             f"PARLEY_DEDUPE_SECONDS ({self.store.dedupe_seconds:g}): a webhook replayed in between "
                             f"would be applied again")
        return self

    if not TYPE_CHECKING:  # hidden from mypy, so Parley's own code must use the groups (a typo stays an error)
        def __getattr__(self, name: str) -> Any:
            """``settings.llm_model`` as before the groups: a deployment's tool factory (``PARLEY_TOOLS``) may read
            a setting by its flat name; it gets the group's value and a DeprecationWarning naming the new path."""
            route = ROUTE.get(name)
            if route is None:
                return super().__getattr__(name)
            group, field = route
            warnings.warn(f"settings.{name} is settings.{group}.{field} now", DeprecationWarning, stacklevel=2)
            return getattr(getattr(self, group), field)

    def effective_broker_url(self) -> str:
        return self.broker.url or self.redis.effective_url()


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once."""
    return Settings()
