"""The environment stays flat while the settings come in groups: every setting's flat name (``burst_quiet_seconds``),
the variable it is read from (``PARLEY_BURST_QUIET_SECONDS`` or a standard name such as ``REDIS_URL``), and the
environment sources that hand the flat values on to their groups."""

from __future__ import annotations

from copy import copy
from typing import Any, cast

from pydantic import AliasChoices, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import InitErrorDetails
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from worker.settings.delivery import Delivery, WhatsApp
from worker.settings.drain import Burst, Drain
from worker.settings.group import STANDARD
from worker.settings.ingress import PhotoLimits, Producers, Webhook
from worker.settings.model import Budget, GameContext, Llm, Memory, Tooling
from worker.settings.observability import Observability
from worker.settings.opt_out import OptOut
from worker.settings.store import Broker, Record, Redis, Store

GROUPS: dict[str, type[Any]] = {
    "redis": Redis, "broker": Broker, "llm": Llm, "tooling": Tooling, "memory": Memory, "store": Store,
    "drain": Drain, "burst": Burst, "media": PhotoLimits, "webhook": Webhook, "producers": Producers,
    "delivery": Delivery, "whatsapp": WhatsApp,
    "record": Record, "budget": Budget, "observability": Observability,
    "game_context": GameContext, "opt_out": OptOut,
}


def knobs(group: type[Any]) -> dict[str, tuple[str, FieldInfo]]:
    """A group's settings by flat name (``burst_quiet_seconds``): its field's name and info."""
    out = {}
    for name, info in group.__pydantic_fields__.items():
        if not info.exclude:
            alias = info.validation_alias
            out[alias if isinstance(alias, str) else name] = (name, info)
    return out


def env_name(flat: str, info: FieldInfo) -> str:
    """The variable a setting is documented under: its standard name, or PARLEY_ + its flat name."""
    return flat.upper() if info.json_schema_extra == STANDARD else f"PARLEY_{flat.upper()}"


# Flat name -> (group, field): where an environment variable or a flat keyword argument goes.
ROUTE: dict[str, tuple[str, str]] = {flat: (group, name) for group, cls in GROUPS.items()
                                      for flat, (name, _) in knobs(cls).items()}


_ROUTE_INFO: dict[str, FieldInfo] = {flat: GROUPS[g].__pydantic_fields__[n] for flat, (g, n) in ROUTE.items()}


def _flat_field(flat: str, info: FieldInfo) -> FieldInfo:
    """The field the environment sources look ``flat`` up by: the group's (so JSON and NoDecode are as there), under
    PARLEY_ + its flat name, or for a standard name that name with and without PARLEY_."""
    std = env_name(flat, info)
    field = copy(info)
    field.validation_alias = AliasChoices(std, f"PARLEY_{std}") if not std.startswith("PARLEY_") else None
    return field


class _Flat:
    """The settings by flat name, for the environment sources, which read only a settings class's ``model_config``
    and ``model_fields``: a catalogue, never a model (building one of 106 fields is a start-up cost every process
    would pay for nothing)."""

    # populate_by_name: a value found under a field's own name is taken as it is (not looked up a second time).
    model_config = SettingsConfigDict(env_prefix="PARLEY_", env_file=".env", extra="ignore", populate_by_name=True)
    model_fields = {flat: _flat_field(flat, info) for flat, info in _ROUTE_INFO.items()}


FLAT = cast(type[BaseSettings], _Flat)


def grouped(flat: dict[str, Any]) -> dict[str, Any]:
    """``{"lease_seconds": 5, "burst": Burst(...)}`` -> ``{"drain": {"lease_seconds": 5}, "burst": Burst(...)}``."""
    out = {key: value for key, value in flat.items() if key.lower() not in ROUTE}  # groups, _env_file, unknowns
    for key, value in flat.items():
        if (route := ROUTE.get(key.lower())) is None:
            continue
        group, name = route
        given = out.get(group)
        if given is None:
            out[group] = {name: value}
        elif isinstance(given, dict):
            out[group] = {**given, name: value}
        else:  # a group object and one of its settings by flat name: the flat one wins, as in a dict
            out[group] = {**{f: getattr(given, f) for f in type(given).__pydantic_fields__}, name: value}
    return out


# Any key an environment source hands back (a flat name, a standard name with or without PARLEY_) -> the flat name.
_FLAT_NAME = {a.lower(): flat for flat, info in _ROUTE_INFO.items()
              for a in (flat, env_name(flat, info), f"PARLEY_{env_name(flat, info)}")}


class Regrouped(PydanticBaseSettingsSource):
    """An environment source over the flat names, its values handed on by group."""

    def __init__(self, settings_cls: type[BaseSettings], inner: PydanticBaseSettingsSource) -> None:
        super().__init__(settings_cls)
        self.inner = inner

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        raise NotImplementedError  # __call__ reads the inner source whole

    def __call__(self) -> dict[str, Any]:
        return grouped({_FLAT_NAME.get(k.lower(), k): v for k, v in self.inner().items()})


_VARIABLE: dict[tuple[str, str], str] = {(g, n): env_name(flat, _ROUTE_INFO[flat]) for flat, (g, n) in ROUTE.items()}


def by_variable(exc: ValidationError) -> ValidationError:
    """``exc`` with each error located at the variable (``PARLEY_BURST_MAX_MESSAGES``), not the group's field."""
    errors: list[InitErrorDetails] = []
    for e in exc.errors():
        loc = e["loc"]
        variable = _VARIABLE.get((str(loc[0]), str(loc[1]))) if len(loc) >= 2 else None
        errors.append(InitErrorDetails(type=e["type"], loc=(variable, *loc[2:]) if variable else loc,  # type: ignore[typeddict-item]
                                       input=e["input"], ctx=e.get("ctx", {})))
    return ValidationError.from_exception_data(exc.title, errors)
