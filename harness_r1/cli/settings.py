"""The settings every CLI command reads: loaded once per invocation, from the command's own
`--config`, else the root `harness-r1 --config FILE`, else `$HARNESS_R1_CONFIG`, then the
`HARNESS_R1_*` environment over the defaults (the same merge the daemon does).

Importing the settings module is deferred to the first command that needs it, so `--help` and
commands that need no settings start fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness_r1.daemon.settings import Settings

_root_config: Path | None = None
_loaded: dict[Path | None, Settings] = {}


def use_root_config(path: Path | None) -> None:
    """Set by the root command for this invocation (None: no root `--config`)."""
    global _root_config
    _root_config = path
    _loaded.clear()


def cli_settings(config: Path | None = None) -> Settings:
    """The settings in effect for this command: `config` (the command's own `--config`) wins
    over the root one; every bad value is reported at once (`load_settings`)."""
    from harness_r1.daemon.settings import load_settings

    path = config if config is not None else _root_config
    if path not in _loaded:
        _loaded[path] = load_settings(path)
    return _loaded[path]
