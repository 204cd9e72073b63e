"""`harness-r1 keys` and `harness-r1 overlay`: an operator's session against the real broker."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness_r1.cli.app import app
from harness_r1.consumers.broadcast_reader import BroadcastReader
from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.consumers.kafka_client import KafkaSettings
from harness_r1.contracts import ControlCommand, OverlayRelease
from harness_r1.deploy.signing import Keyring, open_envelope

runner = CliRunner()
REFERENCE = Path(__file__).resolve().parents[2] / "harness_r1" / "sandbox" / "reference_patches"

pytestmark = pytest.mark.integration


@pytest.fixture
def operator_env(tmp_path: Path, kafka_broker: EmbeddedBroker) -> dict[str, str]:
    result = runner.invoke(app, ["keys", "generate", "ops-1", "--dir", str(tmp_path / "keys")])
    assert result.exit_code == 0, result.output
    run = uuid.uuid4().hex[:8]
    return {
        "HARNESS_R1_CACHE": str(tmp_path / "cache"),
        "HARNESS_R1_KAFKA_BOOTSTRAP": kafka_broker.bootstrap,
        "HARNESS_R1_SIGNING_KEY": str(tmp_path / "keys" / "ops-1.key"),
        "HARNESS_R1_RELEASE_TOPIC": f"rel-{run}",
        "HARNESS_R1_CONTROL_TOPIC": f"ctl-{run}",
        "USER": "alice",
    }


def cli(env: dict[str, str], *args: str) -> str:
    result = runner.invoke(app, list(args), env=env)
    assert result.exit_code == 0, result.output
    return result.output


def test_add_release_rollback_show_diff(operator_env: dict[str, str], tmp_path: Path) -> None:
    env = operator_env
    a = cli(env, "overlay", "add", str(REFERENCE / "dbbench_lookup.patch"), "--target", "p1")
    b = cli(env, "overlay", "add", str(REFERENCE / "dbbench_lookup.patch"), "--target", "p1")
    a, b = a.strip(), b.strip()
    cli(env, "overlay", "release", a, "--reason", "won its canary")
    cli(env, "overlay", "release", b, "--fraction", "0.25")
    listing = cli(env, "overlay", "list", "--target", "p1")
    assert "active" in listing and "canary" in listing
    assert a in listing and b in listing  # whole ids when piped
    cli(env, "overlay", "rollback", "--target", "p1", "--reason", "users complain")
    shown = json.loads(cli(env, "overlay", "show", b))
    assert shown["state"] == "rolled_back"
    last = shown["events"][-1]
    assert (last["actor"], last["reason"]) == ("alice", "users complain")
    assert cli(env, "overlay", "diff", a, b).strip() == "(identical hook sources)"

    keyring = Keyring.from_directory(tmp_path / "keys")
    kafka = KafkaSettings(bootstrap=env["HARNESS_R1_KAFKA_BOOTSTRAP"])
    topics = [env["HARNESS_R1_RELEASE_TOPIC"], env["HARNESS_R1_CONTROL_TOPIC"]]
    with BroadcastReader(kafka, topics) as reader:
        records = []
        for _ in range(50):
            records += reader.poll(100)
            if len(records) >= 3:
                break
    payloads = [open_envelope(r.value, keyring) for r in records]
    releases = [p for p in payloads if isinstance(p, OverlayRelease)]
    [command] = [p for p in payloads if isinstance(p, ControlCommand)]
    assert [(r.overlay_id, r.seq, r.rollout_fraction) for r in releases] == [
        (a, 1, 1.0),
        (b, 2, 0.25),
    ]
    assert (command.revoke_overlay_id, command.actor) == (b, "alice")


def test_add_refuses_a_patch_the_sandbox_rejects(
    operator_env: dict[str, str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {
                "env": "dbbench",
                "description": "imports os",
                "hooks": [
                    {
                        "hook": "pre_action",
                        "code": "import os\ndef hook(ctx, state):\n    return None\n",
                    }
                ],
            }
        )
    )
    result = runner.invoke(app, ["overlay", "add", str(bad), "--target", "p1"], env=operator_env)
    assert result.exit_code == 1
    assert "rejected" in result.output


def test_publishing_commands_need_brokers_and_a_key(tmp_path: Path) -> None:
    env = {"HARNESS_R1_CACHE": str(tmp_path)}
    result = runner.invoke(app, ["overlay", "pause", "--target", "p1"], env=env)
    assert result.exit_code != 0
    assert "HARNESS_R1_KAFKA_BOOTSTRAP" in result.output


def test_a_link_composed_onto_a_chain_is_shown_link_by_link(
    operator_env: dict[str, str], tmp_path: Path
) -> None:
    env = operator_env
    root = cli(env, "overlay", "add", str(REFERENCE / "dbbench_lookup.patch"), "--target", "p2")
    root = root.strip()
    hint = tmp_path / "hint.patch"
    hint.write_text(
        "# env: dbbench\n# description: a hint after SQL errors\n"
        "# === hook: post_feedback ===\n"
        "def hook(ctx, state):\n    return 'Check the column names.'\n"
    )
    link = cli(env, "overlay", "add", str(hint), "--target", "p2", "--parent", root).strip()
    shown = json.loads(cli(env, "overlay", "show", link))
    composition = shown["composition"]
    assert composition["chain"] == [root, link]
    assert composition["contributors"]["post_feedback"] == [root, link]
    assert composition["contributors"]["pre_action"] == [root]
    assert composition["link"]["description"] == "a hint after SQL errors"
    whole = cli(env, "overlay", "diff", root, link)
    assert "def link2():" in whole  # what the fleet runs: the composition
    own = cli(env, "overlay", "diff", root, link, "--links")
    assert "Check the column names." in own and "def link2" not in own
    removal = tmp_path / "removal.patch"
    removal.write_text("# env: dbbench\n# === hook: post_feedback (remove) ===\n")
    refused = runner.invoke(app, ["overlay", "add", str(removal), "--target", "p2"], env=env)
    assert refused.exit_code == 1 and "not_composed" in refused.output
    removed = cli(env, "overlay", "add", str(removal), "--target", "p2", "--parent", link).strip()
    after = json.loads(cli(env, "overlay", "show", removed))
    assert "post_feedback" not in after["composition"]["contributors"]


def test_list_show_and_release_say_when_a_pool_is_paused_or_pinned(
    operator_env: dict[str, str],
) -> None:
    """Agents park new releases while their pool is paused or pinned: the registry records
    the hold from the commands, and `overlay list`, `show` and `release` say so until
    `resume` (a release made while paused was once shown as `canary` and nothing more)."""
    env = operator_env
    a = cli(env, "overlay", "add", str(REFERENCE / "dbbench_lookup.patch"), "--target", "p2")
    a = a.strip()
    cli(env, "overlay", "release", a)
    assert "paused" not in cli(env, "overlay", "list", "--target", "p2")
    cli(env, "overlay", "pause", "--target", "p2", "--reason", "INC-7")
    b = cli(env, "overlay", "add", str(REFERENCE / "dbbench_lookup.patch"), "--target", "p2")
    b = b.strip()
    result = runner.invoke(app, ["overlay", "release", b, "--fraction", "0.5"], env=env)
    assert result.exit_code == 0, result.output
    assert "pool p2 is paused" in result.output and "overlay resume" in result.output
    listing = cli(env, "overlay", "list", "--target", "p2")
    assert "pool p2 is paused" in " ".join(listing.split()), listing
    assert "by alice" in " ".join(listing.split())
    assert "is paused" in json.loads(cli(env, "overlay", "show", b))["pool_hold"]
    cli(env, "overlay", "pin", "--target", "p2", "--to", a)
    assert f"pinned to {a}" in " ".join(cli(env, "overlay", "list", "--target", "p2").split())
    cli(env, "overlay", "resume", "--target", "p2")
    assert "pool p2 is" not in cli(env, "overlay", "list", "--target", "p2")
    assert json.loads(cli(env, "overlay", "show", b))["pool_hold"] is None


def test_config_after_the_command_is_the_root_option(tmp_path: Path) -> None:
    """`harness-r1 overlay list --config daemon.yaml` (the runbook's commands, written the way
    operators type them) reads that file, as `harness-r1 --config daemon.yaml overlay list`
    does; it was refused with "No such option: --config"."""
    import subprocess
    import sys

    from harness_r1.cli.app import hoist_config

    config = tmp_path / "daemon.yaml"
    config.write_text(f"state_url: sqlite:///{tmp_path / 'state.db'}\n")
    script = Path(sys.executable).parent / "harness-r1"
    done = subprocess.run(
        [str(script), "overlay", "list", "--config", str(config), "--target", "p9"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "state.db").exists()  # the file's store, not the default one
    # commands with a --config of their own keep it
    assert hoist_config(["publish", "f.jsonl", "--config", "c.yaml"])[0] == "publish"
