"""The fourth env, a plugin nobody here wrote the games of: examples/textworld_env (TextWorld's
own challenge games) installed as an operator would, then run through `env list|check`,
`eval`, `canary` and the daemon's loop on the embedded broker."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from harness_r1.cli.app import app
from harness_r1.contracts import FailurePacket, Trajectory
from harness_r1.envs import env_names, get_suite

HR = str(Path(sys.executable).parent / "harness-r1")
runner = CliRunner()

#: a patch for any env: one advisory line before each decision (the model still decides)
ADVICE_PATCH = """\
# env: textworld
# description: remind the model that the commands that work are listed after each observation
# === hook: pre_decision ===
def hook(ctx, state):
    '''A format reminder: a command copied from the list is one the game understands.'''
    return 'Copy one command exactly as written in AVAILABLE ACTIONS.'
"""


def test_it_is_found_through_its_entry_point_and_keeps_the_contract(
    textworld_plugin: Path,
) -> None:
    listed = subprocess.run([HR, "env", "list"], capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "textworld\tplugin: harness-r1-textworld 0.1.0" in listed.stdout
    check = [HR, "env", "check", "textworld", "--split", "test"]
    checked = subprocess.run(check, capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "textworld: split test: 40 tasks, ids unique" in checked.stdout
    assert checked.stdout.strip().endswith("textworld: ok")
    assert "textworld" in env_names()


def test_splits_hold_out_seeds_and_difficulty(textworld_plugin: Path) -> None:
    suite = get_suite("textworld")
    splits = {split: suite.load_tasks(Path("."), split) for split in suite.splits}
    seeds = {name: {t.payload["seed"] for t in tasks} for name, tasks in splits.items()}
    assert seeds["train"].isdisjoint(seeds["test"]) and seeds["test"] == seeds["test_hard"]
    levels = {name: {t.payload["level"] for t in tasks} for name, tasks in splits.items()}
    assert levels == {"train": {"easy"}, "test": {"easy"}, "test_hard": {"hard"}}
    types = {t.task_type for t in splits["test"]}
    assert types == {"coin_collector", "treasure_hunter", "cooking", "simple"}
    # a spread of 4 tasks meets every challenge (the catalogue is ordered challenge by challenge)
    assert len({t.task_type for t in splits["test"][::10]}) == 4


@pytest.mark.integration
def test_eval_and_canary_run_the_embedded_target_on_it(
    textworld_plugin: Path, tmp_path: Path
) -> None:
    """The deployed agent (SmolLM2 with its adapter) plays two held-out games, then the canary
    re-runs them with and without a patch and gates it."""
    out = tmp_path / "tw.jsonl"
    args = ["eval", "--env", "textworld", "--split", "test", "--limit", "2", "--max-steps", "2"]
    result = runner.invoke(app, [*args, "--max-new-tokens", "24", "--out", str(out)])
    assert result.exit_code == 0, result.output
    trajectories = [Trajectory.model_validate_json(line) for line in out.read_text().splitlines()]
    assert [t.task.task_id for t in trajectories] == [
        "coin_collector/easy/seed1001",
        "cooking/easy/seed1001",
    ]
    assert all(t.env == "textworld" and t.outcome.steps >= 1 for t in trajectories)
    assert "textworld" in result.output and "95% interval" in result.output

    patch, report = tmp_path / "advice.patch", tmp_path / "canary.json"
    patch.write_text(ADVICE_PATCH, encoding="utf-8")
    canary = ["canary", "--env", "textworld", "--split", "test", "--patch", str(patch)]
    options = ["--limit", "2", "--guard-limit", "0", "--max-steps", "2", "--max-new-tokens", "24"]
    result = runner.invoke(app, [*canary, *options, "--out", str(report)])
    assert result.exit_code == 0, result.output
    body = json.loads(report.read_text())
    (candidate,) = body["batch"]["candidates"]
    assert candidate["status"] == "evaluated", candidate
    assert len(body["gate"]) == 1  # judged: promoted or refused, with its reason


@pytest.mark.integration
def test_the_daemon_improves_or_honestly_rejects_on_it(
    textworld_plugin: Path, tmp_path: Path
) -> None:
    """Failures of a fleet on the embedded broker reach the daemon, become a packet (generic
    rules, said), the template teacher's candidates are canaried on the same games and gated.
    The target is a named test double that always looks around (it cannot win a game), so
    the honest outcome is a rejection; the real model runs in `make bench`."""
    from harness_r1.demo import DemoOptions, DemoParts, run_demo
    from harness_r1.harness import HarnessRuntime, HookSet, RunConfig
    from harness_r1.harness.policies import ScriptedPolicy
    from harness_r1.sandbox import CanaryRunner, IsolatedHooks, SandboxConfig, static_validator

    looker = ScriptedPolicy(["THOUGHT: I should look around first.\nACTION: look"])

    def canary_for(env: str, progress: Any) -> CanaryRunner:
        config = RunConfig(agent_id="canary", max_steps=3, lockstep=4)
        runtime = HarnessRuntime(get_suite(env), looker, Path("."), config)

        def hooks(patch: Any, candidate_id: str) -> HookSet:
            return IsolatedHooks(patch, SandboxConfig(call_budget_s=2.0), overlay_id=candidate_id)

        return CanaryRunner(runtime, hooks, static_validator(), progress=progress)

    options = DemoOptions(
        env="textworld",
        split="test",
        agents=2,
        episodes_per_agent=2,
        rounds=1,
        max_steps=3,
        k=2,
        guard_tasks=0,
        guard_phases=1,
        out=tmp_path / "run",
    )
    console = Console(record=True, width=200)
    parts = DemoParts(policy=looker, canary_for=canary_for)
    result = run_demo(options, Path("."), tmp_path / "cache", console, parts)
    text = console.export_text()
    (round_one,) = result.rounds
    assert {t.env for t in round_one.fleet} == {"textworld"}, text
    assert len(round_one.fleet) == 4 and not any(t.outcome.success for t in round_one.fleet)
    assert round_one.batch_id is not None, text
    assert len(round_one.candidates) == 2, text  # K template proposals, each canaried
    assert all(c.delta_success is not None for c in round_one.candidates if c.status == "evaluated")
    assert round_one.promoted is None, text  # nothing a looking-only target can win with
    with sqlite3.connect(tmp_path / "run" / "state.db") as db:
        (packet_json,) = db.execute("SELECT packet_json FROM daemon_packets").fetchone()
    packet = FailurePacket.model_validate_json(packet_json)
    assert packet.env == "textworld" and packet.rules == "generic"
