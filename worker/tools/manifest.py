"""The tool manifest (``PARLEY_TOOLS_FILE``): HTTP tools and MCP servers, in YAML or JSON, validated at worker start.

The format is documented in docs/tools.md. A bad manifest fails the worker's start with a
:class:`~worker.errors.ConfigurationError` naming the file and the field, so a typo never reaches a player's turn.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator

from worker.conversation.tools import schema_validator
from worker.errors import ConfigurationError, ToolError

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class HttpToolSpec(BaseModel):
    """One HTTP tool: the model sees ``name``, ``description`` and ``parameters``; a call POSTs to ``url``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str = Field(min_length=1)
    parameters: dict[str, Any]
    url: str = Field(pattern=r"^https?://")
    timeout: float | None = Field(None, gt=0)
    headers: dict[str, str] = Field(default_factory=dict)
    # False: a call that may already have reached the engine (the worker died inside it) is not made again when
    # the turn is retried; the model reads that its outcome is unknown. True: it is, with the same Idempotency-Key.
    idempotent: bool = False

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, v: dict[str, Any]) -> dict[str, Any]:
        if v.get("type") != "object":
            raise ValueError("must be a JSON schema with type 'object'")
        try:
            schema_validator("parameters", v)
        except ToolError as exc:  # the file and the field are named by load_manifest
            raise ValueError(str(exc).removeprefix("tool 'parameters': parameters ")) from None
        return v


class McpServerSpec(BaseModel):
    """One MCP server over the streamable HTTP transport."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)


class McpStdioSpec(BaseModel):
    """One MCP server over stdio: ``command`` with ``args``, run by each worker process with a minimal environment
    (``PATH``, ``HOME``, ``USER``, ``LOGNAME``, ``SHELL``, ``TERM``) plus ``env``, never the worker's own secrets."""

    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)


def _transport(entry: Any) -> str | None:
    """Which kind of MCP server an ``mcp_servers`` entry is: ``url`` (streamable HTTP) or ``command`` (stdio)."""
    if isinstance(entry, BaseModel):
        return "command" if isinstance(entry, McpStdioSpec) else "url"
    if isinstance(entry, dict):
        return "command" if "command" in entry else "url"
    return None


McpSpec = Annotated[Annotated[McpServerSpec, Tag("url")] | Annotated[McpStdioSpec, Tag("command")],
                    Discriminator(_transport)]


class ContextSpec(BaseModel):
    """The game's live context: ``POST url`` at the start of every turn; the answer's ``system`` text joins that
    turn's system prompt (:mod:`worker.game_context`)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(pattern=r"^https?://")
    timeout: float | None = Field(None, gt=0)
    headers: dict[str, str] = Field(default_factory=dict)


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tools: list[HttpToolSpec] = Field(default_factory=list)
    mcp_servers: list[McpSpec] = Field(default_factory=list)
    context: ContextSpec | None = None


def expand_headers(headers: dict[str, str], where: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """``${VAR}`` in a header value is read from the environment; an unset variable is a configuration error
    (a missing token would otherwise be sent as an empty one and fail every call)."""
    env = dict(os.environ) if env is None else env
    return {key: expand_vars(value, f"header {key!r}", where, env) for key, value in headers.items()}


def expand_env(spec: McpStdioSpec, env: dict[str, str] | None = None) -> dict[str, str]:
    """A stdio server's ``env`` with ``${VAR}`` read from the environment, as in a header."""
    env = dict(os.environ) if env is None else env
    return {key: expand_vars(value, f"env {key!r}", f"mcp_servers (command {spec.command!r})", env)
            for key, value in spec.env.items()}


def expand_vars(value: str, what: str, where: str, env: dict[str, str] | None = None) -> str:
    """``value`` with every ``${VAR}`` read from ``env`` (default: the environment); raises
    :class:`ConfigurationError` naming ``where`` and ``what`` when one is not set."""
    env = dict(os.environ) if env is None else env

    def sub(match: re.Match[str]) -> str:
        if match.group(1) not in env:
            raise ConfigurationError(f"{where}: {what} uses ${{{match.group(1)}}}, which is not set")
        return env[match.group(1)]

    return _VAR.sub(sub, value)


def load_manifest(path: str | Path) -> Manifest:
    """Read and validate a manifest; YAML unless the file ends in ``.json`` (JSON is YAML too, but its errors
    read better from the JSON parser)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"PARLEY_TOOLS_FILE {file}: cannot read it ({exc.strerror or exc})") from exc
    try:
        data = json.loads(text) if file.suffix.lower() == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigurationError(f"PARLEY_TOOLS_FILE {file}: not valid {'JSON' if file.suffix == '.json' else 'YAML'}: "
                                 f"{exc}") from exc
    try:
        manifest = Manifest.model_validate(data if data is not None else {})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or '(top level)'}: {e['msg']}"
                             for e in exc.errors())
        raise ConfigurationError(f"PARLEY_TOOLS_FILE {file}: {problems}") from exc
    names = [t.name for t in manifest.tools]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigurationError(f"PARLEY_TOOLS_FILE {file}: tools: duplicate name(s) {', '.join(dupes)}")
    return manifest
