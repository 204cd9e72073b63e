"""The tuned target's rows: the target's own accepted outputs, or the executed actions, of
successful episodes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from harness_r1.contracts import (
    EffectKind,
    HookEffect,
    HookName,
    Outcome,
    Step,
    TargetRef,
    TaskRef,
    Termination,
    Timings,
    Trajectory,
)
from harness_r1.envs import get_suite
from harness_r1.harness.runtime import GenerationRecord
from harness_r1.trainer.target_sft import (
    check_runs_of,
    executed_success_rows,
    own_success_rows,
    read_records,
)


def _trajectory(name: str, success: bool, steps: list[Step]) -> Trajectory:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return Trajectory(
        trajectory_id=name,
        agent_id="eval",
        target=TargetRef(model_id="m"),
        harness_version="base",
        task=TaskRef(
            env="dbbench",
            split="standard",
            task_id=f"task-{name}",
            task_type="counting",
            instruction="How many?",
            seed=0,
        ),
        steps=steps,
        outcome=Outcome(
            success=success,
            reward=float(success),
            termination=Termination.SUCCESS if success else Termination.FAILURE,
            steps=len(steps),
        ),
        timings=Timings(started_at=now, finished_at=now),
    )


def _step(index: int, raw: str, action: str, *effects: HookEffect) -> Step:
    return Step(index=index, observation="o", raw_output=raw, action=action, effects=list(effects))


def _record(name: str, step: int, output: str) -> GenerationRecord:
    messages = [{"role": "user", "content": f"{name} {step} {output}"}]
    return GenerationRecord(trajectory_id=name, step=step, messages=messages, output=output)


def test_rows_are_the_targets_own_accepted_outputs_in_successful_episodes() -> None:
    rewrite = HookEffect(hook=HookName.PRE_ACTION, kind=EffectKind.REWRITE, text="sql: x")
    hint = HookEffect(hook=HookName.POST_FEEDBACK, kind=EffectKind.HINT, text="h")
    won = _trajectory(
        "won",
        True,
        [
            _step(0, "Action: sql y", "sql: y", hint),  # its own, with a hint after: kept
            _step(1, "The answer", "sql: x", rewrite),  # rewritten by the harness: left out
            _step(2, "", "answer: [1]"),  # forced, no model call: left out
            _step(3, "Action: answer 2", "answer: [2]"),  # no record of the call: left out
            _step(4, "Action: answer 3", "answer: [3]"),
        ],
    )
    lost = _trajectory("lost", False, [_step(0, "Action: sql z", "sql: z")])
    records = [
        _record("won", 0, "Action: sql y"),
        _record("won", 1, "The answer"),
        _record("won", 4, "first try"),  # a vetoed call: the step's last call counts
        _record("won", 4, "Action: answer 3"),
        _record("lost", 0, "Action: sql z"),
    ]

    rows = own_success_rows([won, lost], records)

    assert [(r["metadata"]["step"], r["completion"][0]["content"]) for r in rows] == [
        (0, "Action: sql y"),
        (4, "Action: answer 3"),
    ]
    assert rows[0]["prompt"] == [{"role": "user", "content": "won 0 Action: sql y"}]
    assert rows[0]["metadata"] == {
        "trajectory_id": "won",
        "task_id": "task-won",
        "env": "dbbench",
        "step": 0,
    }


def test_executed_rows_learn_the_action_each_step_ran_whoever_wrote_it() -> None:
    """Own rows leave out a forced step; executed rows take the forced action as the completion
    of the call the target made at that step, and leave out steps without a call (or with a
    call of another run) and actions the prompter would not read back as themselves."""
    force = HookEffect(hook=HookName.PRE_ACTION, kind=EffectKind.FORCE, text="sql: SELECT 1")
    won = _trajectory(
        "won",
        True,
        [
            _step(0, "The method is decision.", "sql: SELECT 1", force),  # forced: learned
            _step(1, "Action: Answer\nFinal Answer: [1]", "answer: [1]"),  # its own: learned
            _step(2, "", "answer: [2]"),  # forced after feedback, no call: left out
            _step(3, "x", "SELECT 2"),  # the prompter reads it as `sql: SELECT 2`: left out
        ],
    )
    lost = _trajectory("lost", False, [_step(0, "Action: sql z", "sql: z")])
    records = [
        _record("won", 0, "The method is decision."),
        _record("won", 1, "Action: Answer\nFinal Answer: [1]"),
        _record("won", 3, "x"),
        _record("lost", 0, "Action: sql z"),
    ]
    prompters = {"dbbench": get_suite("dbbench").prompter}

    # own rows: only the steps whose output ran as written
    assert [r["metadata"]["step"] for r in own_success_rows([won, lost], records)] == [1, 3]
    rows = executed_success_rows([won, lost], records, prompters)

    assert [(r["metadata"]["step"], r["completion"][0]["content"]) for r in rows] == [
        (0, "sql: SELECT 1"),
        (1, "answer: [1]"),
    ]
    assert rows[0]["prompt"] == [{"role": "user", "content": "won 0 The method is decision."}]
    assert [r["metadata"]["own"] for r in rows] == [False, True]
    other_run = [_record("won", 0, "another output"), *records[1:]]
    assert [r["metadata"]["step"] for r in executed_success_rows([won], other_run, prompters)] == [
        1
    ]


def test_a_record_that_is_not_the_steps_output_is_not_trained_on() -> None:
    won = _trajectory("won", True, [_step(0, "Action: a", "a")])
    assert own_success_rows([won], [_record("won", 0, "Action: b")]) == []


@pytest.mark.integration
def test_the_tuned_target_is_a_checkpoint_the_runtime_serves(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    from harness_r1.harness.policies.factory import PolicySpec, build_policy
    from harness_r1.models.base import GenerationRequest
    from harness_r1.trainer.model_io import resolve_base
    from harness_r1.trainer.sft import SftSettings, train_sft
    from harness_r1.trainer.target_experts import write_rows
    from harness_r1.trainer.target_sft import merge_checkpoint

    won = _trajectory("won", True, [_step(0, "Action: answer 3", "answer: [3]")])
    rows = own_success_rows([won], [_record("won", 0, "Action: answer 3")]) * 2
    write_rows(rows, tmp_path / "rows.jsonl")
    settings = SftSettings(
        output_root=tmp_path / "out", max_steps=1, batch_size=2, max_length=256, threads=1
    )
    adapter = train_sft(tmp_path / "rows.jsonl", settings=settings).version_dir
    base = resolve_base("smollm2")

    tuned = merge_checkpoint(base, adapter, tmp_path / "tuned")

    merged, original = (
        load_file(str(tuned / "model.safetensors")),
        load_file(str(base / "model.safetensors")),
    )
    assert set(merged) == set(original)  # plain weights: no LoRA modules left
    changed = [k for k in original if not torch.equal(merged[k], original[k])]
    assert changed and all("proj" in k for k in changed)  # LoRA's targets moved
    policy = build_policy(PolicySpec(kind=str(tuned), dtype="float32"))
    messages = [{"role": "user", "content": "How many?"}]
    [answer] = policy.generate([GenerationRequest(messages=messages)])
    assert policy.model_id == "tuned" and answer.tokens > 0


def test_a_stopped_runs_cut_last_record_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    whole = '{"trajectory_id": "t", "step": 0, "messages": [], "output": "a"}\n'
    path.write_text(whole + '{"trajectory_id": "t", "step": 1, "mess')
    assert read_records(path) == [GenerationRecord("t", 0, [], "a")]


def test_a_model_is_not_trained_on_another_models_runs() -> None:
    runs = [_trajectory("won", True, [])]
    check_runs_of(runs, "m")
    with pytest.raises(ValueError, match="the runs are m's, not gemma-3-270m's"):
        check_runs_of(runs, "gemma-3-270m")
