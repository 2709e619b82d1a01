"""Reading ``PARLEY_WHATSAPP_NUMBERS_FILE`` (its format: :mod:`worker.settings.business_numbers`): each entry checked,
its token's ``${VAR}`` read from the environment, and a number's own tools file checked as the tools load it, so a bad
file stops a process at start naming the entry. The settings hold the numbers as data; reading them needs the tools'
manifest, which sits above the settings, hence this module in the wiring."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from worker.errors import ConfigurationError
from worker.runtime.config_file import read_config
from worker.settings.business_numbers import SETTING, Number, Numbers
from worker.settings.delivery import WhatsApp
from worker.tools.manifest import expand_vars, load_manifest


class NumberSpec(BaseModel):
    """One entry of the numbers file, as written (the token still holds its ``${VAR}``)."""

    model_config = ConfigDict(extra="forbid")

    phone_number_id: str = Field(min_length=1, max_length=40)
    access_token: str = Field(min_length=1)
    system_prompt: str | None = None
    tools_file: str | None = None

    @field_validator("phone_number_id", mode="before")
    @classmethod
    def _digits(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            v = str(v)  # YAML reads an unquoted id as a number
        if isinstance(v, str) and not (v.isascii() and v.isdigit()):
            raise ValueError("a phone number id is digits only (as Meta's WhatsApp Manager shows it)")
        return v


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    numbers: list[NumberSpec] = Field(min_length=1)


def load_numbers(path: str | Path, *, default_id: str | None = None, default_token: str | None = None,
                 env: dict[str, str] | None = None) -> Numbers:
    """Read and check the numbers file; every problem is a :class:`ConfigurationError` naming the file and the
    entry. ``default_id``/``default_token`` are ``WHATSAPP_PHONE_NUMBER_ID``/``WHATSAPP_ACCESS_TOKEN``."""
    file = Path(path)
    where = f"{SETTING} {file}"
    data = read_config(file, where)
    try:
        specs = _File.model_validate(data if data is not None else {}).numbers
    except ValidationError as exc:
        raise ConfigurationError(f"{where}: {_problems(exc, data)}") from exc
    numbers = [_number(spec, f"{where}: numbers[{i}] ({spec.phone_number_id})", env) for i, spec in enumerate(specs)]
    ids = [n.phone_number_id for n in numbers]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ConfigurationError(f"{where}: phone_number_id {', '.join(dupes)} listed more than once")
    if default_id and default_id not in ids:
        if not default_token:
            raise ConfigurationError(f"{where}: WHATSAPP_PHONE_NUMBER_ID {default_id} is not in the file and "
                                     "WHATSAPP_ACCESS_TOKEN is not set")
        numbers.insert(0, Number(default_id, default_token))
    elif default_id:
        numbers.insert(0, numbers.pop(ids.index(default_id)))
    return Numbers(numbers[0], tuple(numbers[1:]))


def _number(spec: NumberSpec, where: str, env: dict[str, str] | None) -> Number:
    token = expand_vars(spec.access_token, "access_token", where, env).strip()
    if not token:
        raise ConfigurationError(f"{where}: access_token is empty")
    if spec.tools_file is not None:
        try:
            manifest = load_manifest(spec.tools_file)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{where}: tools_file: {exc}") from exc
        if manifest.mcp_servers or manifest.context is not None:
            # One MCP session set and one live context per process: a number's own would need their own.
            raise ConfigurationError(f"{where}: tools_file {spec.tools_file}: a number's tools file lists HTTP "
                                     "tools only (put mcp_servers and context in PARLEY_TOOLS_FILE)")
    return Number(spec.phone_number_id, token, spec.system_prompt, spec.tools_file)


def _problems(exc: ValidationError, data: Any) -> str:
    """Pydantic's errors, each naming the entry (``numbers[1] (1065...)``) and its field."""
    out = []
    for e in exc.errors():
        loc = list(e["loc"])
        name = ".".join(str(x) for x in loc) or "(top level)"
        if len(loc) >= 2 and loc[0] == "numbers" and isinstance(loc[1], int):
            entry = data["numbers"][loc[1]] if isinstance(data, dict) else None
            pnid = entry.get("phone_number_id") if isinstance(entry, dict) else None
            name = f"numbers[{loc[1]}]" + (f" ({pnid})" if pnid is not None else "") + \
                "".join(f".{x}" for x in loc[2:])
        out.append(f"{name}: {e['msg']}")
    return "; ".join(out)


def served_numbers(whatsapp: WhatsApp) -> Numbers | None:
    """The numbers the webhook ingress serves: the file's (:func:`numbers_from_settings`), else the one number of
    ``WHATSAPP_PHONE_NUMBER_ID`` (Meta sends the account's other numbers' webhooks too: those are skipped), else
    ``None``: no number configured (the demo), every change is accepted. The ingress never sends: a token it lacks is
    not needed."""
    numbers = numbers_from_settings(whatsapp)
    if numbers is not None or not whatsapp.phone_number_id:
        return numbers
    token = whatsapp.access_token.get_secret_value() if whatsapp.access_token else ""
    return Numbers(Number(whatsapp.phone_number_id, token))


def numbers_from_settings(whatsapp: WhatsApp) -> Numbers | None:
    """The numbers of the settings' WhatsApp group: the file's when ``PARLEY_WHATSAPP_NUMBERS_FILE`` is set,
    else ``None`` (one number, from ``WHATSAPP_PHONE_NUMBER_ID``, with today's ids)."""
    if not whatsapp.numbers_file:
        return None
    token = whatsapp.access_token.get_secret_value() if whatsapp.access_token else None
    return load_numbers(whatsapp.numbers_file, default_id=whatsapp.phone_number_id, default_token=token)
