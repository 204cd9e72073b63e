"""The tuned target (the paper's coevolution): the frozen target fine-tuned on its own
successful episodes, weights updated directly, then served like any other checkpoint.

Rows: every model call of a successful episode whose output the harness took as it was (no
pre_action rewrite, force or veto on that step), as a conversational prompt/completion row:
the messages the target read and the text it wrote (`runtime.GenerationRecord`, recorded by
`harness-r1 eval --record-generations`). What the harness changed is left out: the tuned
target learns what it did right itself, and the incumbent overlay still runs on top of it
(whether patching still adds on a tuned target is what the experiment asks).

Training is the engineer's SFT (`trainer.sft.train_sft`: LoRA, completion-only loss) on the
target's own base; `merge_checkpoint` folds the adapter into a full checkpoint directory, which
`--policy DIR` serves (its directory name is its model id, so canary baselines of the tuned and
the frozen target never mix).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from harness_r1.contracts import HookName, Trajectory


def own_success_rows(
    trajectories: Iterable[Trajectory], records: Iterable[dict[str, Any]]
) -> list[dict[str, Any]]:
    """SFT rows of the target's own accepted outputs in successful episodes, in trajectory and
    step order. `records`: GenerationRecord dicts of the same run (trajectory_id, step,
    messages, output); the last call of a step is the one that counts."""
    calls: dict[tuple[str, int], dict[str, Any]] = {}
    for record in records:
        calls[(record["trajectory_id"], int(record["step"]))] = record
    rows = []
    for trajectory in trajectories:
        if not trajectory.outcome.success:
            continue
        for step in trajectory.steps:
            changed = any(e.hook == HookName.PRE_ACTION for e in step.effects)
            call = calls.get((trajectory.trajectory_id, step.index))
            if changed or not step.raw_output or call is None or call["output"] != step.raw_output:
                continue
            rows.append(
                {
                    "prompt": call["messages"],
                    "completion": [{"role": "assistant", "content": call["output"]}],
                    "metadata": {
                        "trajectory_id": trajectory.trajectory_id,
                        "task_id": trajectory.task.task_id,
                        "env": trajectory.env,
                        "step": step.index,
                    },
                }
            )
    return rows


def read_records(path: Path) -> list[dict[str, Any]]:
    with Path(path).open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def write_rows(rows: Sequence[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def merge_checkpoint(base_dir: Path, adapter_dir: Path, out_dir: Path) -> Path:
    """The base model with the LoRA adapter folded into its weights, saved with its tokenizer
    as a plain checkpoint (written under a temporary name, then renamed: never half-written)."""
    import shutil

    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    base = AutoModelForCausalLM.from_pretrained(str(base_dir))
    merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    merged.save_pretrained(str(tmp))
    AutoTokenizer.from_pretrained(str(adapter_dir)).save_pretrained(str(tmp))
    tmp.rename(out_dir)
    return out_dir
