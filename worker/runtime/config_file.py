"""Reading a YAML or JSON configuration file (JSON when it ends in ``.json``: its errors read better from the JSON
parser), every problem a :class:`ConfigurationError` naming the setting and the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from worker.errors import ConfigurationError


def read_config(file: Path, where: str) -> Any:
    """The file's data (``None`` when empty); ``where`` (``SETTING path``) starts every error."""
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"{where}: cannot read it ({exc.strerror or exc})") from exc
    is_json = file.suffix.lower() == ".json"
    try:
        return json.loads(text) if is_json else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigurationError(f"{where}: not valid {'JSON' if is_json else 'YAML'}: {exc}") from exc
