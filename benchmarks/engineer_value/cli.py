"""The command line: which stages run, in the order given, on which envs, against which
target, into which DIR. Each stage is a function of its own module; this module only parses
the arguments, sets the run-wide ones once (`use_target_policy`, `use_grpo_steps`) and calls
the stages.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .ablation import run_ablation
from .baselines import run_baselines
from .coevolution import run_coevolution
from .coldstart import run_coldstart
from .crosstask import run_crosstask
from .deployed import run_deployed
from .engineers import run_engineers
from .grpo import stage_grpo
from .headroom import run_headroom
from .reach import run_reach
from .rft import stage_rft
from .sampling import run_sampling
from .settings import CURVE_PACKETS, DEFAULT_ENVS, ENGINEERS, use_grpo_steps, use_target_policy
from .sft import run_sft
from .transfer import run_transfer

STAGES = (
    "baselines", "deployed", "coldstart", "sft", "sampling", "grpo", "rft", "engineers",
    "headroom", "ablation", "transfer", "coevolution", "reach", "crosstask",
)  # fmt: skip


def main() -> None:
    about = sys.modules[__package__].__doc__ or ""  # the package's: what the experiment is
    parser = argparse.ArgumentParser(description=about.split("\n\n")[0])
    parser.add_argument("--envs", default=",".join(DEFAULT_ENVS))
    parser.add_argument("--out", type=Path, default=Path("runs/engineer-value"))
    parser.add_argument(
        "--teacher", action="store_true", help="Stage 2: also score the template teacher."
    )
    parser.add_argument(
        "--stages",
        default="baselines",
        help=f"Comma-separated, run in the order given: {', '.join(STAGES)}; or 'all'.",
    )
    parser.add_argument(
        "--engineers",
        default=",".join(ENGINEERS),
        help="The engineers (and reach) stage's rows, a subset of: " + ", ".join(ENGINEERS),
    )
    parser.add_argument(
        "--sampling-packets",
        type=int,
        default=CURVE_PACKETS,
        help="The sampling stage's held-out packets per env.",
    )
    parser.add_argument(
        "--grpo-minutes",
        type=float,
        default=None,
        help="The GRPO stage's time budget: it pauses before overrunning it and commits its "
        "checkpoint for the next run to continue.",
    )
    parser.add_argument(
        "--grpo-steps",
        type=int,
        default=None,
        help="The GRPO stage's optimizer steps against --target-policy (default: GRPO_ARGS', "
        "100); another count is another engineer.",
    )
    parser.add_argument(
        "--target-policy",
        default=None,
        help="The target every stage runs (`--policy` of harness-r1's commands): default the "
        "embedded SmolLM2; gemma3 or a checkpoint dir, e.g. the tuned target of the "
        "coevolution stage (use a fresh --out).",
    )
    args = parser.parse_args()
    embedded = args.target_policy in (None, "smollm2")
    if args.grpo_steps is not None and (args.grpo_steps < 1 or embedded):
        parser.error("--grpo-steps takes a positive count, with --target-policy only")
    use_target_policy(args.target_policy)
    use_grpo_steps(args.grpo_steps)
    stages = list(STAGES) if args.stages == "all" else args.stages.split(",")
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        parser.error(f"unknown stages: {', '.join(unknown)}")
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "commands.log"
    envs = args.envs.split(",")
    names = tuple(n for n in ENGINEERS if n in args.engineers.split(","))
    for stage in stages:
        if stage == "baselines":
            run_baselines(envs, args.out, log, args.teacher or args.stages == "all")
        elif stage == "coldstart":
            run_coldstart(envs, args.out, log)
        elif stage == "sft":
            run_sft(envs, args.out, log)
        elif stage == "sampling":
            run_sampling(envs, args.out, log, args.sampling_packets)
        elif stage == "grpo":
            print(f"GRPO engineer: {stage_grpo(envs, args.out, log, args.grpo_minutes)}")
        elif stage == "rft":
            print(f"RFT engineer: {stage_rft(envs, args.out, log)}")
        elif stage == "headroom":
            run_headroom(envs, args.out, log)
        elif stage == "deployed":
            run_deployed(envs, args.out, log)
        elif stage == "ablation":
            run_ablation(envs, args.out, log)
        elif stage == "transfer":
            run_transfer(envs, args.out, log)
        elif stage == "coevolution":
            run_coevolution(envs, args.out, log)
        elif stage == "crosstask":
            run_crosstask(args.out, log)
        elif stage == "reach":
            run_reach(envs, args.out, log, names)
        else:
            run_engineers(envs, args.out, log, names)
