"""The settings reference (docs/configuration.md), written from the Settings model itself so it
cannot fall behind: every setting with its YAML key, environment variable, default and
description, and the ones a production deployment must set, with why.

`harness-r1 config reference` prints it; tests/daemon/test_settings_reference.py holds the
committed file to it (`make docs` rewrites it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from harness_r1.daemon.settings.errors import ENV_PREFIX, group_fields
from harness_r1.daemon.settings.model import Settings

#: Settings a production deployment must set, and why (the defaults suit a laptop).
PRODUCTION: dict[str, str] = {
    "kafka_bootstrap": "the brokers; the daemon has no default broker",
    "state_url": "PostgreSQL (`postgresql+psycopg://...`) so canary workers and a standby "
    "share state; the default SQLite file is for one process on one host",
    "signing_key": "signs overlay releases and control commands; without it nothing is "
    "released to agents",
    "keys_dir": "the public keys agents and the daemon trust (distribute the same directory)",
    "data": "the benchmark tasks the canary replays (default ../shared/benchmarks)",
    "cache": "a persistent volume for converted model checkpoints",
    "loop.target_policy": "the frozen target the canary re-runs: `openai` with "
    "loop.target_url and loop.target_model for a served model",
    "loop.release_target": "the pool of agents releases go to (the agents' client target)",
    "kafka.security_protocol": "SSL or SASL_SSL outside a loopback network (plaintext is "
    "logged as a warning)",
    "metrics.port": "a fixed port Prometheus scrapes (0 picks a free one)",
    "sandbox.accept_shared_uid": "true only when the daemon runs as non-root (e.g. in the "
    "container image): hook workers then share its uid",
}

_INTRO = """# Configuration

Every setting of the daemon and the CLI, generated from the settings model
(`harness-r1 config reference`; `make docs` rewrites this file and a test keeps it current).

Sources, highest first: keyword arguments, `HARNESS_R1_*` environment variables (nested groups
joined with `__`, e.g. `HARNESS_R1_LOOP__BATCH_SIZE=16`), a YAML file (`--config FILE` or
`HARNESS_R1_CONFIG`), then the defaults below. `harness-r1 config show` prints what is in
effect; unknown keys and bad values are errors that name the setting and how to fix it.

**Production** marks what a production deployment must set; everything else has a default
meant to be kept.
"""


def settings_reference() -> str:
    """The markdown reference of every setting."""
    lines = [_INTRO, "## Must be set in production", ""]
    lines += [f"- `{key}`: {why}" for key, why in PRODUCTION.items()]
    fields = Settings.model_fields.items()
    top = [(name, f) for name, f in fields if group_fields(f.annotation) is None]
    lines += ["", "## Top level", "", *_table("", top)]
    for name, info in fields:
        group = group_fields(info.annotation)
        if group is not None:
            lines += ["", f"## `{name}`: {info.description or ''}", ""]
            lines += _table(name, list(group.items()))
    return "\n".join(lines) + "\n"


def _table(group: str, fields: list[tuple[str, FieldInfo]]) -> list[str]:
    rows = ["| setting | environment variable | default | description |", "|---|---|---|---|"]
    for name, info in fields:
        key = f"{group}.{name}" if group else name
        env = ENV_PREFIX + (f"{group}__{name}" if group else name).upper()
        marker = " **Production.**" if key in PRODUCTION else ""
        description = (info.description or "").replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{key}` | `{env}` | {_default(info)} | {description}{marker} |")
    return rows


def _default(info: FieldInfo) -> str:
    if info.default is PydanticUndefined:
        value: Any = info.default_factory() if info.default_factory else None  # type: ignore[call-arg]
    else:
        value = info.default
    if value is None:
        return "none"
    if isinstance(value, SecretStr):
        return "secret"
    if isinstance(value, Path):
        home = str(Path.home())
        text = str(value)
        return f"`~{text[len(home) :]}`" if text.startswith(home) else f"`{text}`"
    if isinstance(value, BaseModel):
        return "(group)"
    return f"`{value!r}`" if isinstance(value, str) else f"`{value}`"
