from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness_r1.cli.app import app
from harness_r1.contracts import Trajectory
from harness_r1.contracts.schemas import render_schemas

runner = CliRunner()


def test_schemas_export_writes_every_schema(tmp_path: Path) -> None:
    result = runner.invoke(app, ["schemas", "export", str(tmp_path)])
    assert result.exit_code == 0, result.output
    written = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert written == render_schemas()


def test_data_status_shows_every_env_and_split() -> None:
    result = runner.invoke(app, ["data", "status"])
    assert result.exit_code == 0, result.output
    for env, split, tasks in [
        ("alfworld", "valid_seen", "140"),
        ("dbbench", "dev", "60"),
        ("webshop", "fixed", "60"),
    ]:
        assert any(
            env in line and split in line and tasks in line for line in result.output.splitlines()
        )


def test_bad_data_root_is_a_clear_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["data", "status"], env={"HARNESS_R1_DATA": str(tmp_path / "nope")})
    assert result.exit_code != 0
    assert "is not a directory" in str(result.exception) or "is not a directory" in result.output


def test_missing_data_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "dbbench").mkdir()
    (tmp_path / "dbbench" / "dev.jsonl").write_text('{"description": "x"}\nnot json\n')
    env = {"HARNESS_R1_DATA": str(tmp_path), "COLUMNS": "400"}
    result = runner.invoke(app, ["data", "status"], env=env)
    assert result.exit_code == 0, result.output
    [dev] = [line for line in result.output.splitlines() if "dbbench" in line and "dev" in line]
    assert "dev.jsonl" in dev and "line 2 is not valid JSON" in dev
    [standard] = [line for line in result.output.splitlines() if "standard" in line]
    assert "standard_even.jsonl" in standard and "missing" in standard


def test_unknown_split_is_refused() -> None:
    result = runner.invoke(app, ["eval", "--env", "dbbench", "--split", "nope", "--limit", "1"])
    assert result.exit_code != 0
    assert "unknown split" in str(result.exception) + result.output


@pytest.mark.integration
def test_eval_writes_trajectories_and_prints_rates(tmp_path: Path) -> None:
    out, calls = tmp_path / "runs" / "x.jsonl", tmp_path / "calls.jsonl"
    args = ["eval", "--env", "dbbench", "--split", "dev", "--limit", "2", "--max-steps", "1"]
    result = runner.invoke(
        app,
        [*args, "--lockstep", "2", "--out", str(out), "--max-new-tokens", "16"]
        + ["--record-generations", str(calls)],
    )
    assert result.exit_code == 0, result.output
    lines = out.read_text().splitlines()
    trajectories = [Trajectory.model_validate(json.loads(line)) for line in lines]
    assert len(trajectories) == 2
    assert {t.task.task_id for t in trajectories} == {"dev-000", "dev-030"}
    assert all(t.outcome.steps == 1 for t in trajectories)
    assert "95% interval" in result.output and "dbbench" in result.output
    records = [json.loads(line) for line in calls.read_text().splitlines()]
    outputs = {(r["trajectory_id"], r["step"]): r["output"] for r in records}
    assert outputs == {(t.trajectory_id, 0): t.steps[0].raw_output for t in trajectories}
    assert all(r["messages"][0]["role"] == "system" for r in records)


@pytest.mark.integration
def test_eval_on_an_incumbent_runs_its_hooks(tmp_path: Path) -> None:
    """`--on PATCH`: the episodes run under the overlay (isolated), stamped with its id."""
    out = tmp_path / "on.jsonl"
    patch = Path("harness_r1/sandbox/reference_patches/dbbench_lookup.patch").resolve()
    args = ["eval", "--env", "dbbench", "--split", "dev", "--limit", "2", "--max-steps", "1"]
    result = runner.invoke(
        app, [*args, "--max-new-tokens", "16", "--out", str(out), "--on", str(patch)]
    )
    assert result.exit_code == 0, result.output
    lines = out.read_text().splitlines()
    trajectories = [Trajectory.model_validate_json(line) for line in lines]
    assert len(trajectories) == 2
    assert all(t.harness_version.startswith("on-") for t in trajectories)
    assert any(t.episode_start_effects for t in trajectories)  # the overlay's hooks ran
    assert "overlay on-" in result.output


@pytest.mark.integration
def test_eval_with_self_refine_replays_failures_with_the_targets_critique(
    tmp_path: Path,
) -> None:
    out = tmp_path / "refined.jsonl"
    args = ["eval", "--env", "dbbench", "--split", "dev", "--limit", "2", "--max-steps", "1"]
    result = runner.invoke(
        app, [*args, "--max-new-tokens", "16", "--out", str(out), "--self-refine"]
    )
    assert result.exit_code == 0, result.output
    lines = out.read_text().splitlines()
    trajectories = [Trajectory.model_validate_json(line) for line in lines]
    assert len(trajectories) == 2  # the ones that count, one per task
    replayed = [t for t in trajectories if t.harness_version == "self-refine"]
    assert replayed, "SmolLM2 solves no DBBench task in one step: both are replayed"
    assert all(t.episode_start_effects for t in replayed)  # the critique, as a skill
    assert "first attempts" in result.output and "Self-Refine: 2 failures" in result.output


def test_patch_check_accepts_reference_patches_and_rejects_hostile(tmp_path: Path) -> None:
    from harness_r1.sandbox.patchfile import REFERENCE_DIR

    for path in sorted(REFERENCE_DIR.glob("*.patch")):
        result = runner.invoke(app, ["patch", "check", str(path)])
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["ok"] is True
    code = "def hook(ctx, state):\n    return ''.__class__\n"
    bad = tmp_path / "bad.txt"
    bad.write_text(json.dumps({"env": "dbbench", "hooks": [{"hook": "pre_action", "code": code}]}))
    result = runner.invoke(app, ["patch", "check", str(bad)])
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert report["ok"] is False and report["error"]["code"] == "private_attribute"
    garbage = tmp_path / "garbage.txt"
    garbage.write_text("no patch here")
    assert runner.invoke(app, ["patch", "check", str(garbage)]).exit_code == 2


def test_packet_build_prints_one_packet_per_group(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from harness_r1.contracts import FailurePacket, Outcome, Step, TargetRef, TaskRef, Timings

    now = datetime(2026, 1, 1, tzinfo=UTC)
    rows = []
    for i, success in enumerate([False, False, True]):
        rows.append(
            Trajectory(
                trajectory_id=f"traj-{i}",
                agent_id="a",
                target=TargetRef(model_id="m"),
                harness_version="base",
                task=TaskRef(
                    env="dbbench",
                    split="dev",
                    task_id=f"dev-00{i}",
                    task_type="INSERT",
                    instruction="insert it",
                    seed=i,
                ),
                steps=[
                    Step(
                        index=0,
                        observation="q",
                        raw_output="x",
                        action="x",
                        feedback="Invalid action",
                    )
                ],
                outcome=Outcome(
                    success=success, reward=float(success), termination="failure", steps=1
                ),
                timings=Timings(started_at=now, finished_at=now),
            ).model_dump_json()
        )
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(rows) + "\n")
    result = runner.invoke(app, ["packet", "build", str(runs)])
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("{")]
    packet = FailurePacket.model_validate_json(line)
    assert len(packet.episodes) == 2 and "dev-00" not in line and "traj-" not in line
    runs.write_text("not json\n")
    bad = runner.invoke(app, ["packet", "build", str(runs)])
    assert bad.exit_code != 0 and ":1:" in str(bad.exception)


@pytest.mark.integration
def test_engineer_evaluate_scores_the_template_teacher_for_validity_without_episodes(
    tmp_path: Path,
) -> None:
    """`engineer evaluate --teacher N --validity-only`: the teacher writes (no engineer model),
    its proposals are parsed, checked and composed, and no canary episode runs."""
    runs = tmp_path / "dev.jsonl"
    args = ["eval", "--env", "dbbench", "--split", "dev", "--limit", "4", "--max-steps", "1"]
    result = runner.invoke(app, [*args, "--max-new-tokens", "16", "--out", str(runs)])
    assert result.exit_code == 0, result.output
    report = tmp_path / "teacher.json"
    evaluate = ["engineer", "evaluate", str(runs), "--env", "dbbench", "--split", "dev"]
    options = ["-k", "2", "--batch-size", "2", "--validity-only", "--out", str(report)]
    result = runner.invoke(app, [*evaluate, *options, "--teacher", "1"])
    assert result.exit_code == 0, result.output
    summary = json.loads(report.read_text())["summary"]
    assert summary["engineer"] == "template" and summary["packets"] == 2
    assert summary["proposals"] == 4 and summary["valid"] == 4  # the teacher writes valid patches
    assert summary["canary_episodes"] == summary["baseline_episodes"] == 0
    assert summary["gated"] is False and summary["promoted_fraction"] is None
    refused = runner.invoke(app, [*evaluate, *options, "--teacher", "1", "--gate"])
    assert refused.exit_code != 0 and "--gate needs the canary" in refused.output
    # interrupted after its first packet, the same request resumes: that packet is kept as it
    # was written (the marker), the second is scored as an uninterrupted run scores it
    data = json.loads(report.read_text())
    partial = report.with_suffix(".partial.json")
    marked = {**data, "packets": [{**data["packets"][0], "generate_seconds": 12345.0}]}
    partial.write_text(json.dumps(marked))
    resumed = runner.invoke(app, [*evaluate, *options, "--teacher", "1"])
    assert resumed.exit_code == 0 and "resuming after 1 of 2 packets" in resumed.output
    again = json.loads(report.read_text())
    assert again["packets"][0]["generate_seconds"] == 12345.0
    assert again["packets"][1]["samples"] == data["packets"][1]["samples"]
    assert not partial.exists()  # the whole report is written
    # the progress of another request (two templates a patch) is not taken
    partial.write_text(json.dumps(marked))
    other = runner.invoke(app, [*evaluate, *options, "--teacher", "2"])
    assert other.exit_code == 0 and "the progress of another request" in other.output
    assert json.loads(report.read_text())["packets"][0]["generate_seconds"] != 12345.0
    # a progress file that cannot be read is set aside with its reason, the run starts over
    partial.write_text('{"resume_key": ')
    broken = runner.invoke(app, [*evaluate, *options, "--teacher", "2"])
    assert broken.exit_code == 0 and "unreadable (JSONDecodeError" in broken.output
    assert json.loads(report.read_text())["summary"]["packets"] == 2


def test_engineer_propose_with_the_template_teacher(tmp_path: Path) -> None:
    from harness_r1.sandbox.parse import parse_engineer_output
    from harness_r1.sandbox.static import check_patch

    packet_file = tmp_path / "packet.json"
    from harness_r1.contracts import FailurePacket, PacketEpisode, RuntimeSignals, TargetRef

    packet = FailurePacket(
        packet_id="x" * 64,
        env="dbbench",
        target=TargetRef(model_id="m"),
        harness_version="base",
        selection="round_robin",
        token_budget=4000,
        episodes=[
            PacketEpisode(
                masked_task_id="T1",
                task_type="counting",
                instruction=(
                    "How many rows? The name of this table is T, and the headers of this "
                    "table are A,B."
                ),
                success=False,
                reward=0.0,
                termination="step_limit",
                steps=3,
                snippets=[],
            )
        ],
        signals=RuntimeSignals(sql_errors=5, invalid_actions=3),
        batch_size=1,
        failures=1,
    )
    packet_file.write_bytes(packet.to_json_bytes())
    result = runner.invoke(
        app, ["engineer", "propose", str(packet_file), "-k", "3", "--backend", "template"]
    )
    assert result.exit_code == 0, result.output
    proposals = json.loads(result.output)
    assert len(proposals) == 3
    for proposal in proposals:
        parsed = parse_engineer_output(proposal["text"], env="dbbench")
        assert parsed.patch is not None and check_patch(parsed.patch).ok


def test_train_commands_are_wired_and_check_their_input(tmp_path: Path) -> None:
    for command in ("coldstart", "sft", "grpo"):
        assert runner.invoke(app, ["train", command, "--help"]).exit_code == 0
    empty = tmp_path / "groups.jsonl"
    empty.write_text("")
    result = runner.invoke(app, ["train", "grpo", "replay", str(empty)])
    assert result.exit_code != 0 and "no replay groups" in str(result.exception)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{}\n")
    result = runner.invoke(app, ["train", "grpo", "replay", str(bad)])
    assert result.exit_code != 0 and ":1: not a replay group" in str(result.exception)


def test_canary_table_has_a_header_per_value() -> None:
    from harness_r1.cli.jobs.canary import canary_table
    from harness_r1.contracts import CanaryReport, CandidateResult, TargetRef
    from harness_r1.sandbox.gate import reject_unevaluated

    report = CanaryReport(
        batch_id="b",
        env="dbbench",
        target=TargetRef(model_id="m"),
        tasks=2,
        baseline_cached=False,
        baseline_success_rate=0.0,
        baseline_cost={"episodes": 2},
        candidates=[
            CandidateResult(
                candidate_id="c", patch_sha256=None, status="invalid", invalid_reason="x"
            )
        ],
    )
    table = canary_table(report, None, {"c": reject_unevaluated("invalid: x")})
    assert len(table.columns) == 11  # forced share and patch alone beside the delta
    assert all(len(column._cells) == 1 for column in table.columns)


def test_grpo_is_two_commands_each_with_its_own_source(tmp_path: Path) -> None:
    listing = runner.invoke(app, ["train", "grpo"])
    assert "online" in listing.output and "replay" in listing.output
    for mode in ("online", "replay"):
        result = runner.invoke(app, ["train", "grpo", mode])
        assert result.exit_code == 2 and "Missing argument" in result.output
    online = runner.invoke(app, ["train", "grpo", "online", "--help"], terminal_width=200)
    assert "--graded-invalid" in online.output
    replay = runner.invoke(app, ["train", "grpo", "replay", "--help"], terminal_width=200)
    assert "--graded-invalid" not in replay.output and "--history-turns" not in replay.output


class _Stop(Exception):
    """Raised by the recording stand-in for run_canary: the test needs the request only."""


def test_canary_options_default_to_the_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One source of defaults: an option left out takes the settings' value (here from the
    environment), an option given wins."""
    import harness_r1.cli.jobs as jobs
    from harness_r1.cli.settings import use_root_config

    seen = []

    def record(request, root, console):  # type: ignore[no-untyped-def]
        seen.append(request)
        raise _Stop

    # on the package the command imports it from: a lazy export is cached there on first use,
    # so patching the defining module would leave the stand-in behind for later tests
    monkeypatch.setattr(jobs, "run_canary", record)
    monkeypatch.setenv("HARNESS_R1_LOOP__HISTORY_TURNS", "2")
    monkeypatch.setenv("HARNESS_R1_LOOP__MAX_NEW_TOKENS", "40")
    monkeypatch.setenv("HARNESS_R1_LOOP__GATE_MIN_BATCH", "3")
    monkeypatch.setenv("HARNESS_R1_LOOP__GATE_ALPHA", "0.1")
    monkeypatch.delenv("HARNESS_R1_CONFIG", raising=False)
    use_root_config(None)  # forget settings an earlier test loaded
    patch = tmp_path / "p.patch"
    base = ["canary", "--env", "dbbench", "--split", "dev", "--patch", str(patch)]
    assert isinstance(runner.invoke(app, base).exception, _Stop)
    use_root_config(None)
    given = [*base, "--history-turns", "5", "--min-batch", "9", "--dtype", "bfloat16"]
    given += ["--guard-limit", "0"]
    assert isinstance(runner.invoke(app, given).exception, _Stop)
    defaulted, explicit = seen
    assert (defaulted.target.history_turns, defaulted.target.max_new_tokens) == (2, 40)
    assert (defaulted.gate.min_batch_tasks, defaulted.gate.alpha) == (3, 0.1)
    assert defaulted.gate.min_guard_tasks == 20  # not set anywhere: the GateConfig default
    assert (defaulted.guard_limit, explicit.guard_limit) == (20, 0)  # loop.guard_limit, else 0
    assert (explicit.target.history_turns, explicit.gate.min_batch_tasks) == (5, 9)
    assert explicit.target.max_new_tokens == 40
    assert (defaulted.target.dtype, explicit.target.dtype) == ("auto", "bfloat16")
    assert explicit.target.policy_spec().dtype == "bfloat16"


def test_the_target_engine_defaults_the_commands_show_are_the_policy_specs() -> None:
    from harness_r1.cli import options
    from harness_r1.cli.jobs.target import TargetSpec
    from harness_r1.harness.policies.factory import PolicySpec

    spec = PolicySpec()
    assert (
        spec.dtype,
        spec.prefix_cache,
        spec.batched_decode,
        spec.draft_tokens,
    ) == (
        options.TARGET_DTYPE,
        options.TARGET_PREFIX_CACHE,
        options.TARGET_BATCHED_DECODE,
        options.TARGET_DRAFT_TOKENS,
    )
    target = TargetSpec().policy_spec()
    assert (target.dtype, target.prefix_cache, target.batched_decode) == ("auto", True, True)
    assert target.draft_tokens == 4
