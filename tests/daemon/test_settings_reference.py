"""docs/configuration.md is the settings reference the model writes (`make docs`): a setting
added, renamed or described differently without rewriting it fails here; every setting has a
description, and each production-required one exists."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from harness_r1.cli.app import app
from harness_r1.daemon.settings import Settings
from harness_r1.daemon.settings.errors import group_fields
from harness_r1.daemon.settings.reference import PRODUCTION, settings_reference

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def _all_keys() -> dict[str, str]:
    """Every setting `config show` prints (a group's keys dotted), with its description."""
    keys = {}
    for name, value in Settings().masked().items():
        info = Settings.model_fields[name]
        if isinstance(value, dict):
            fields = group_fields(info.annotation) or {}
            for sub in value:
                keys[f"{name}.{sub}"] = fields[sub].description or ""
        else:
            keys[name] = info.description or ""
    return keys


def test_the_committed_reference_is_current() -> None:
    assert DOC.read_text() == settings_reference(), "run `make docs` and commit the result"


def test_every_setting_is_described_and_listed() -> None:
    keys = _all_keys()
    assert [key for key, text in keys.items() if not text] == []
    text = settings_reference()
    assert all(f"| `{key}` |" in text for key in keys)
    assert set(PRODUCTION) <= set(keys), set(PRODUCTION) - set(keys)


def test_the_cli_prints_it() -> None:
    result = CliRunner().invoke(app, ["config", "reference"])
    assert result.exit_code == 0 and result.output == settings_reference()
