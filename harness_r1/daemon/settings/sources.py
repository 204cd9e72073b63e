"""The YAML file as a settings source below the environment, and which file is in effect."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import yaml
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
)

from harness_r1.daemon.settings.errors import SettingsError

CONFIG_ENV = "HARNESS_R1_CONFIG"

# The YAML file of the Settings being built: `from_file` sets it for the duration of one
# construction (a ContextVar, so concurrent constructions in threads do not see each other's).
_CONFIG_FILE: ContextVar[Path | None] = ContextVar("harness_r1_config_file", default=None)
# Flat path fields: relative values in a YAML file are relative to the file, not to the
# working directory of whoever starts the daemon.
_PATH_FIELDS = ("data", "cache", "signing_key", "keys_dir")


class YamlSource(PydanticBaseSettingsSource):
    """The YAML file as one source among the others, below the environment."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path | None) -> None:
        super().__init__(settings_cls)
        self._data = read_config_file(path) if path is not None else {}

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)


def read_config_file(path: Path) -> dict[str, Any]:
    """The YAML mapping in `path`, with relative path fields made relative to the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SettingsError(
            f"cannot read config file {path}: {err.strerror or err}; give an existing YAML "
            f"file (--config or {CONFIG_ENV})"
        ) from err
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise SettingsError(f"config file {path} is not valid YAML: {err}") from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(
            f"config file {path} holds a {type(data).__name__}, not a mapping; write "
            "'key: value' lines, e.g. 'loop:\\n  batch_size: 8'"
        )
    for name in _PATH_FIELDS:
        value = data.get(name)
        if isinstance(value, str):
            resolved = Path(value).expanduser()
            data[name] = str(resolved if resolved.is_absolute() else path.parent / resolved)
    return data


def config_path() -> Path | None:
    explicit = _CONFIG_FILE.get()
    if explicit is not None:
        return explicit
    from_env = os.environ.get(CONFIG_ENV)
    return Path(from_env).expanduser() if from_env else None


@contextmanager
def config_file(path: Path) -> Iterator[None]:
    token = _CONFIG_FILE.set(path)
    try:
        yield
    finally:
        _CONFIG_FILE.reset(token)
