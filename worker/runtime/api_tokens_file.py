"""Reading ``PARLEY_API_TOKENS_FILE`` (its format: :mod:`worker.settings.api_tokens`): each entry checked and its
token's ``${VAR}`` read from the environment, every problem a :class:`ConfigurationError` naming the entry (never the
token). At start a bad file stops the webhook process; when it changes later, the ingress keeps its last good
tokens (:mod:`worker.ingress.api_tokens`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from worker.envelopes.addresses import ID_PATTERN
from worker.errors import ConfigurationError
from worker.runtime.config_file import read_config
from worker.settings.api_tokens import TOKENS_FILE, Grant
from worker.tools.manifest import expand_vars


class TokenSpec(BaseModel):
    """One entry of the tokens file, as written (the token still holds its ``${VAR}``)."""

    model_config = ConfigDict(extra="forbid")

    token: str = Field(min_length=1)
    name: str | None = Field(None, min_length=1, max_length=100)
    scope: Literal["producer", "operator"]
    numbers: list[str] | None = Field(None, min_length=1)
    conversation_prefixes: list[str] | None = Field(None, min_length=1)
    per_second: float | None = Field(None, gt=0)

    @field_validator("numbers", mode="before")
    @classmethod
    def _digits(cls, v: Any) -> Any:
        if not isinstance(v, list):
            return v
        out = [str(n) if isinstance(n, int) and not isinstance(n, bool) else n for n in v]  # YAML reads 1065... as int
        if not all(isinstance(n, str) and n.isascii() and n.isdigit() for n in out):
            raise ValueError("a phone number id is digits only (as Meta's WhatsApp Manager shows it)")
        return out

    @field_validator("conversation_prefixes")
    @classmethod
    def _not_empty(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and not all(v):
            raise ValueError("an empty prefix would reach every conversation: leave conversation_prefixes out instead")
        bad = [p for p in v or () if not ID_PATTERN.fullmatch(p)]
        if bad:  # it could never match: the token would reach nothing, silently
            raise ValueError(f"{bad[0]!r} cannot start a conversation id (letters, digits and ._@+=- only)")
        return v


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: list[TokenSpec]


def load_grants(path: str | Path, *, env: dict[str, str] | None = None) -> tuple[Grant, ...]:
    """Read and check the tokens file. A token listed twice is refused (which entry's limits would hold?)."""
    file = Path(path)
    where = f"{TOKENS_FILE} {file}"
    data = read_config(file, where)
    try:
        specs = _File.model_validate(data if data is not None else {}).tokens
    except ValidationError as exc:
        raise ConfigurationError(f"{where}: {_problems(exc)}") from exc
    grants: list[Grant] = []
    for i, spec in enumerate(specs):
        entry = f"{where}: tokens[{i}]" + (f" ({spec.name})" if spec.name else "")
        token = expand_vars(spec.token, "token", entry, env).strip()
        if not token:
            raise ConfigurationError(f"{entry}: token is empty")
        grants.append(Grant(token.encode(), spec.scope, spec.name or f"{file.name} tokens[{i}]",
                            frozenset(spec.numbers) if spec.numbers is not None else None,
                            tuple(spec.conversation_prefixes) if spec.conversation_prefixes is not None else None,
                            spec.per_second))
    seen: dict[bytes, str] = {}
    for grant in grants:
        if grant.token in seen:
            raise ConfigurationError(f"{where}: {grant.name} has the same token as {seen[grant.token]}")
        seen[grant.token] = grant.name
    return tuple(grants)


def _problems(exc: ValidationError) -> str:
    """Pydantic's errors, each naming the entry and its field (never the value: it may be a token)."""
    return "; ".join(f"{'.'.join(str(x) for x in e['loc']) or '(top level)'}: {e['msg']}" for e in exc.errors())
