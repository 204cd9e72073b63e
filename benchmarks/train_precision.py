"""Training in bf16 on CPU: seconds per SFT step of the engineer (SmolLM2-135M, LoRA) in fp32
and with bf16 autocast (`cpu_bf16`), on real cold-start rows, in the same run.

    .venv/bin/python benchmarks/train_precision.py ROWS.jsonl [--steps 4] [--rounds 2]

ROWS: an SFT dataset (e.g. `runs/engineer-value/engineer-coldstart.jsonl`, written by
`benchmarks/engineer_value --stages coldstart`). Each round trains a fresh adapter for
`--steps` steps in each precision (the order alternates between rounds: fp32 first, then bf16
first), batch 2 as the engineer's SFT; a step's time is measured by a callback from one step's
end to the next (the first step, with its warm-up, is left out). Prints the median step time
per precision and their ratio, and the mean loss of the steps both ran (the same rows in the
same order: how far bf16 moves it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def step_timer() -> Any:
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.ends: list[float] = []
            self.losses: list[float] = []

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.ends.append(time.perf_counter())

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs and "loss" in logs:
                self.losses.append(float(logs["loss"]))

    return StepTimer()


def one_run(rows: Path, steps: int, cpu_bf16: bool) -> dict[str, Any]:
    from harness_r1.trainer import SftSettings, read_metadata, train_sft

    timer = step_timer()
    with tempfile.TemporaryDirectory() as root:
        settings = SftSettings(
            output_root=Path(root),
            max_steps=steps,
            batch_size=2,
            learning_rate=4e-4,
            save_steps=1000,
            cpu_bf16=cpu_bf16,
        )
        result = train_sft(rows, settings=settings, callbacks=[timer])
        meta = read_metadata(result.version_dir)
    per_step = [b - a for a, b in zip(timer.ends, timer.ends[1:], strict=False)]
    return {
        "step_s": per_step,
        "tokens": meta["tokens"],
        "wall_s": meta["wall_s"],
        "loss": timer.losses,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", type=Path)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="Write the results as JSON.")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {"fp32": [], "bf16": []}
    for round_ in range(args.rounds):
        order = ("fp32", "bf16") if round_ % 2 == 0 else ("bf16", "fp32")
        for name in order:
            run = one_run(args.rows, args.steps, cpu_bf16=name == "bf16")
            runs[name].append(run)
            print(f"round {round_ + 1} {name}: steps {[round(s, 1) for s in run['step_s']]} s")
    median = {n: statistics.median(s for r in rs for s in r["step_s"]) for n, rs in runs.items()}
    loss = {n: statistics.mean(x for r in rs for x in r["loss"]) for n, rs in runs.items()}
    summary = {
        "steps": args.steps,
        "rounds": args.rounds,
        "median_step_s": median,
        "bf16_speedup": median["fp32"] / median["bf16"],
        "mean_loss": loss,
        "runs": runs,
    }
    print(
        f"median s/step: fp32 {median['fp32']:.1f}, bf16 {median['bf16']:.1f}; "
        f"bf16 is {summary['bf16_speedup']:.2f}x as fast; mean loss fp32 {loss['fp32']:.3f}, "
        f"bf16 {loss['bf16']:.3f}"
    )
    if args.out is not None:
        args.out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
