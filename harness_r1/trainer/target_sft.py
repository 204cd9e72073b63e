"""The tuned target (the paper's coevolution): the frozen target fine-tuned on its own
successful episodes, weights updated directly, then served like any other checkpoint.

Rows: every model call of a successful episode whose output the harness took as it was (no
pre_action rewrite, force or veto on that step), as a conversational prompt/completion row:
the messages the target read and the text it wrote (`runtime.GenerationRecord`, recorded by
`harness-r1 eval --record-generations`). What the harness changed is left out: the tuned
target learns what it did right itself, and the incumbent overlay still runs on top of it
(whether patching still adds on a tuned target is what the experiment asks).

Rows of the *executed* actions (`executed_success_rows`, `train target --rows executed`): every
step of a successful episode with a model call, the action the env ran as the completion,
whoever wrote it (the target, or a pre_action rewrite or force of the harness). Where the
incumbent decides the actions of its successes (the CPU incumbents of issue 20 force every
step of every success: no own accepted output is left), this is the only thing to learn: the
tuned target absorbs what the harness did, the paper's "weights updated directly". An action
is kept only if the env's prompter reads it back as itself (the target writing it verbatim
would run it).

Training is the engineer's SFT (`trainer.sft.train_sft`: LoRA, completion-only loss) on the
target's own base (the model whose runs they are: checked by `check_runs_of`);
`merge_checkpoint` folds the adapter into a full checkpoint directory, which
`--policy DIR` serves (its directory name is its model id, so canary baselines of the tuned and
the frozen target never mix).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from harness_r1.contracts import HookName, Step, Trajectory
from harness_r1.envs import TaskPrompter
from harness_r1.harness import GenerationRecord


def own_success_rows(
    trajectories: Iterable[Trajectory], records: Iterable[GenerationRecord]
) -> list[dict[str, Any]]:
    """SFT rows of the target's own accepted outputs in successful episodes, in trajectory and
    step order. `records`: the model calls of the same runs; the last call of a step (after
    any veto) is the one that counts."""
    rows = []
    for trajectory, step, call in _success_calls(trajectories, records):
        if step.raw_output and not _changed_by_pre_action(step):
            rows.append(_row(trajectory, step, call, call.output))
    return rows


def executed_success_rows(
    trajectories: Iterable[Trajectory],
    records: Iterable[GenerationRecord],
    prompters: dict[str, TaskPrompter],
) -> list[dict[str, Any]]:
    """SFT rows of the executed actions of successful episodes (see the module docstring): per
    step with a recorded model call, the messages the target read and the action the env ran,
    kept when the env's prompter (`prompters[env]`) reads the action back unchanged.
    `metadata.own`: the target's output ran without a pre_action change (the completion is
    still the action as the prompter read it, not the model's free text)."""
    rows = []
    for trajectory, step, call in _success_calls(trajectories, records):
        if prompters[trajectory.env].extract_action(step.action, {}) == step.action:
            own = not _changed_by_pre_action(step)
            rows.append(_row(trajectory, step, call, step.action, own=own))
    return rows


def _success_calls(
    trajectories: Iterable[Trajectory], records: Iterable[GenerationRecord]
) -> Iterator[tuple[Trajectory, Step, GenerationRecord]]:
    """Each step of a successful episode with the model call that produced its raw output (the
    step's last call; a step without one, or with a record of another run, is skipped)."""
    calls = {(record.trajectory_id, record.step): record for record in records}
    for trajectory in trajectories:
        if not trajectory.outcome.success:
            continue
        for step in trajectory.steps:
            call = calls.get((trajectory.trajectory_id, step.index))
            if call is not None and call.output == step.raw_output:
                yield trajectory, step, call


def _changed_by_pre_action(step: Step) -> bool:
    return any(effect.hook == HookName.PRE_ACTION for effect in step.effects)


def _row(
    trajectory: Trajectory, step: Step, call: GenerationRecord, completion: str, **extra: Any
) -> dict[str, Any]:
    return {
        "prompt": call.messages,
        "completion": [{"role": "assistant", "content": completion}],
        "metadata": {
            "trajectory_id": trajectory.trajectory_id,
            "task_id": trajectory.task.task_id,
            "env": trajectory.env,
            "step": step.index,
            **extra,
        },
    }


def read_records(path: Path) -> list[GenerationRecord]:
    """An `eval --record-generations` file (a cut last line, from a run that was stopped, is
    skipped: its episode never finished, so no trajectory needs it)."""
    records = []
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            try:
                records.append(GenerationRecord(**json.loads(line)))
            except json.JSONDecodeError:
                continue
    return records


def check_runs_of(trajectories: Sequence[Trajectory], model_id: str) -> None:
    """Refuse to train a model on another model's runs (a tuned target learns its own
    successes, not those of the target it replaces)."""
    others = sorted({t.target.model_id for t in trajectories} - {model_id})
    if others:
        raise ValueError(f"the runs are {', '.join(others)}'s, not {model_id}'s")


def merge_checkpoint(base_dir: Path, adapter_dir: Path, out_dir: Path) -> Path:
    """The base model with the LoRA adapter folded into its weights, saved with the base's
    tokenizer (an adapter carries none) as a plain checkpoint (written under a temporary name,
    then renamed: never half-written)."""
    import shutil

    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = out_dir.with_name(f".{out_dir.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    base = AutoModelForCausalLM.from_pretrained(str(base_dir))
    merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    merged.save_pretrained(str(tmp))
    AutoTokenizer.from_pretrained(str(base_dir)).save_pretrained(str(tmp))
    tmp.rename(out_dir)
    return out_dir
