"""`harness-r1 config show`: the merged settings as JSON, secrets masked; bad ones exit 2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness_r1.cli.config import config_app

runner = CliRunner()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("HARNESS_R1_"):
            monkeypatch.delenv(name)


def test_show_merges_file_and_env_and_masks_secrets(tmp_path: Path) -> None:
    config = tmp_path / "daemon.yaml"
    config.write_text(
        "loop:\n  batch_size: 3\n  target_api_key: sk-from-yaml\nmetrics:\n  port: 0\n",
        encoding="utf-8",
    )
    env = {
        "HARNESS_R1_LOOP__K": "6",
        "HARNESS_R1_KAFKA__SASL_PASSWORD": "pw-from-env",
        "HARNESS_R1_KAFKA__SASL_USERNAME": "daemon",
        "HARNESS_R1_KAFKA__SASL_MECHANISM": "PLAIN",
        "HARNESS_R1_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
    }
    result = runner.invoke(config_app, ["show", "--config", str(config)], env=env)
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert (shown["loop"]["batch_size"], shown["loop"]["k"]) == (3, 6)
    assert shown["metrics"]["port"] == 0
    assert shown["loop"]["target_api_key"] == "**********"
    assert shown["kafka"]["sasl_password"] == "**********"
    assert "sk-from-yaml" not in result.output and "pw-from-env" not in result.output


def test_show_without_a_file_prints_the_defaults() -> None:
    result = runner.invoke(config_app, ["show"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["loop"]["batch_size"] == 8
    assert shown["kafka"]["sasl_password"] is None


def test_bad_settings_exit_2_with_the_fix(tmp_path: Path) -> None:
    config = tmp_path / "daemon.yaml"
    config.write_text("guard:\n  promote_probability: 1.5\n", encoding="utf-8")
    result = runner.invoke(
        config_app,
        ["show", "--config", str(config)],
        env={"HARNESS_R1_LOOP__BATCH_SIZE": "0"},
    )
    assert result.exit_code == 2
    assert "loop.batch_size: must be >= 1 (got 0); set HARNESS_R1_LOOP__BATCH_SIZE" in (
        result.stderr
    )
    assert "guard.promote_probability: must be < 1.0 (got 1.5)" in result.stderr
    assert result.stdout == ""


def test_a_missing_file_exits_2() -> None:
    result = runner.invoke(config_app, ["show", "--config", "/nonexistent/daemon.yaml"])
    assert result.exit_code == 2
    assert "cannot read config file /nonexistent/daemon.yaml" in result.stderr


def test_the_root_config_reaches_every_command_and_a_commands_own_wins(tmp_path: Path) -> None:
    from harness_r1.cli.app import app

    root = tmp_path / "root.yaml"
    root.write_text("loop:\n  batch_size: 3\n", encoding="utf-8")
    own = tmp_path / "own.yaml"
    own.write_text("loop:\n  batch_size: 5\n", encoding="utf-8")
    shown = runner.invoke(app, ["--config", str(root), "config", "show"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["loop"]["batch_size"] == 3
    both = runner.invoke(app, ["--config", str(root), "config", "show", "--config", str(own)])
    assert json.loads(both.stdout)["loop"]["batch_size"] == 5
    plain = runner.invoke(app, ["config", "show"])  # the next invocation starts clean
    assert json.loads(plain.stdout)["loop"]["batch_size"] == 8
