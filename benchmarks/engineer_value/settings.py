"""The run description every stage shares: the envs and their splits, how many tasks each
stage runs, how the frozen target runs, how the engineers are trained and sampled, and where
the repository keeps what a run commits (COMMITTED and the engineers under it).

Kept in one module so that every stage runs the target and the engineers the same way: a
setting changed here reaches every command that uses it, and a test reads the same values the
run does. `--target-policy` and `--grpo-steps` are set once, at the entry point
(`use_target_policy`, `use_grpo_steps`), into lists every stage reads.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HR = str(Path(sys.executable).parent / "harness-r1")
#: (training split, held-out split) per env: the issue's splits
SPLITS = {
    "alfworld": ("train", "valid_seen"),
    "dbbench": ("standard", "dev"),
    "webshop": ("fixed_train", "fixed_heldout"),
}
#: the envs of a run, in the order `--envs` defaults to (the merged cold start's row order)
DEFAULT_ENVS = ("webshop", "dbbench", "alfworld")
TRAIN_TASKS = {"alfworld": 16, "dbbench": 16, "webshop": 16}
HELDOUT_TASKS = {"alfworld": 20, "dbbench": 20, "webshop": 20}
#: the frozen target as in the demo and the CPU engineer runs: SmolLM2-135M greedy
TARGET = ["--max-steps", "6", "--history-turns", "3", "--max-new-tokens", "64"]
#: which model the target is (`--policy` of every command that runs it): empty = the embedded
#: SmolLM2; `--target-policy` sets it once, at the entry point (`use_target_policy`), e.g. to
#: the coevolution stage's tuned checkpoint, to train and judge the engineer against it (the
#: paper's retrained engineer). Use a fresh --out then: the run files are keyed by name, not
#: by target. (A target served by vLLM, `--policy openai`, reaches `eval` only so far.)
TARGET_POLICY: list[str] = []
#: training tasks for the engineers' cold start (stage 3), run under the incumbent: every
#: failure becomes packet material; sized for >= 200 kept rows across the three envs
COLDSTART_TASKS = {"alfworld": 24, "dbbench": 150, "webshop": 40}
#: the engineers' cold start: one template per teacher proposal (the shortest completions, what
#: a 135M engineer can learn to copy) and the lean prompt
COLDSTART_EXTRA = ["--lean-prompt", "--max-templates", "1"]
MIN_COLDSTART_ROWS = 200
#: the repository's folder for what a run commits: counts, rates, plots, the incumbents, the
#: cold start's rows without prompts, the trained engineers
COMMITTED = Path(__file__).parents[1] / "results" / "engineer_value"
#: the engineers' SFT: epochs over the cold start, 2 rows a step, a checkpoint every 25 steps
#: (all kept: the validity curve's points). Two epochs left the held-out valid fraction at 2/12
#: (the 135M engineer loops or breaks the JSON; BENCHMARKS.md), far from the issue's 80%;
#: raising SFT_EPOCHS extends the run from its last checkpoint (the run is asked for a step
#: budget, epochs x steps an epoch, and `train sft` resumes a run whose budget grew), or
#: continues the committed engineer from its adapter, and publishes a new version. The SFT of
#: the sectioned output format starts from WARM_START, the three epochs of the same rows
#: written as JSON, and trains SFT_EPOCHS more on the rows as written now
SFT_EPOCHS = 1
#: bf16 autocast on CPU: 1.39x as fast a step as fp32 on an AMD EPYC with AVX512-BF16, the
#: loss the same to 1% (benchmarks/train_precision.py; BENCHMARKS.md "Training in bf16 on CPU");
#: the first 212 steps of the committed engineer were fp32
SFT_ARGS = ["--batch-size", "2", "--learning-rate", "4e-4",
            "--save-steps", "25", "--keep-checkpoints", "0", "--cpu-bf16"]  # fmt: skip
#: how the SFT validity curve samples on held-out packets (as the CPU engineer runs: 0.5 keeps
#: a 135M engineer in the teacher's shape; every curve BENCHMARKS.md reports is at it) and how
#: many packets per env it uses
CURVE_SAMPLING = ["--temperature", "0.5", "--seed", "0", "--max-new-tokens", "512"]
#: how every engineer of the table samples its K proposals: 0.2, chosen by the sampling sweep
#: (`--stages sampling`; BENCHMARKS.md). The sweep of the SFT engineer gave 24/24 valid greedy
#: but one distinct proposal per packet (best-of-K would be best-of-1), 21/24 (88%) at 0.2 with
#: 1-4 distinct proposals a packet, 15/24 (62%) at 0.5: 0.2 keeps most proposals valid and
#: still gives the gate more than one patch to choose from. The same for every engineer (the
#: untrained one too); GRPO samples at 0.8 (GRPO_ARGS), spread within a group being its signal
TABLE_SAMPLING = ["--temperature", "0.2", "--seed", "0", "--max-new-tokens", "512"]
CURVE_PACKETS = 1  # per env and point: the shape; the final valid fraction is stage 5's, on all
#: GRPO at this scale: K=4 per packet, 4 passes per sampled group (so 100 optimizer steps
#: sample 25 groups), 0.8 for samples that differ within a group, the graded invalid reward
#: (from -0.25 for no patch block up, as in the CPU engineer runs)
GRPO_ARGS = ["-k", "4", "--max-steps", "100", "--num-iterations", "4", "--temperature", "0.8",
             "--graded-invalid", "--invalid-reward", "-0.25", "--lean-prompt",
             "--max-completion-length", "512",
             "--target-steps", TARGET[1], "--history-turns", TARGET[3], "--cpu-bf16"]  # fmt: skip


def option_value(args: list[str], name: str) -> str:
    """The value after option `name` in a command's argument list (ValueError without it)."""
    return args[args.index(name) + 1]


#: `--grpo-steps`, once at the entry point (`use_grpo_steps`): GRPO's optimizer steps when not
#: GRPO_ARGS' 100, e.g. the coevolution retrain, which a run of a few hours cannot hold at 100
#: steps
GRPO_STEPS: list[int] = []


def grpo_args() -> list[str]:
    """`train grpo online`'s options: GRPO_ARGS (its steps replaced by `--grpo-steps`) and the
    target's policy (a GRPO run against another target or for other steps is another run: its
    lineage differs)."""
    args = list(GRPO_ARGS)
    if GRPO_STEPS:
        args[args.index("--max-steps") + 1] = str(GRPO_STEPS[0])
    return [*args, *TARGET_POLICY]


def use_grpo_steps(steps: int | None) -> None:
    """`--grpo-steps`, once at the entry point (only with `--target-policy`: the committed
    SmolLM2 engineer, its carried checkpoint and curve are GRPO_ARGS' 100 steps)."""
    GRPO_STEPS[:] = [] if steps is None else [steps]


#: the target of `--target-policy` in a file name (`policy_name`), named once at the entry point
#: (a checkpoint's content version reads the whole checkpoint)
TARGET_NAME: list[str] = []


def use_target_policy(policy: str | None) -> None:
    """`--target-policy`, once at the entry point: every command that runs the target runs
    this one."""
    TARGET_POLICY[:] = [] if policy in (None, "smollm2") else ["--policy", str(policy)]
    TARGET_NAME[:] = [policy_name(TARGET_POLICY[1])] if TARGET_POLICY else []


def published(out: Path) -> tuple[Path, ...]:
    """Where a stage's results go: DIR (what a rerun reads) and the repository's folder for the
    target (`results_home`: what BENCHMARKS.md cites, since DIR, under runs/, is not
    committed).
    Writers make a missing folder (`writable`)."""
    return (out, results_home())


def writable(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def results_home() -> Path:
    """The repository's folder for the results (counts, rates, plots) of runs against the
    target: COMMITTED for the embedded SmolLM2, else a folder of its own named by the target
    (`--target-policy`: a model name, or a checkpoint's last two path parts, e.g. the
    coevolution stage's `against-target-DIGEST-tuned-v0001`), so another target's table never
    merges into SmolLM2's. A checkpoint's name is followed by its content version
    (`checkpoint_version`): a regenerated tuned target keeps its name (`tuned-v0001` of the same
    harnesses) but is another target, whose table must not merge into the old one's. Engineers
    and cold-start rows are committed for SmolLM2 only."""
    return COMMITTED / f"against-{target_name()}" if TARGET_POLICY else COMMITTED


def target_name() -> str:
    """The target of `--target-policy` in a file name (`use_target_policy` named it)."""
    return TARGET_NAME[0]


def policy_name(policy_arg: str) -> str:
    """A `--policy` in a file name (`results_home`): a model name, or a checkpoint's last two
    path parts and its content version (`checkpoint_version`, 8 hex digits)."""
    policy = Path(policy_arg)
    name = "-".join(policy.parts[-2:])
    if policy.is_dir():
        from harness_r1.models import checkpoint_version

        name += "-" + checkpoint_version(policy)[:8]
    return re.sub(r"[^\w.-]+", "-", name).strip("-.")


#: the comparison's engineers, in the table's order (GRPO rows appear once trained)
ENGINEERS = ("untrained", "teacher", "sft", "grpo", "rft")
#: the promotion gate at this scale: packets of 4 tasks and a guard of the other 16 held-out
#: tasks (the daemon's minimums, 8 and 20, would leave every verdict inconclusive here)
GATE = ["--gate", "--gate-min-batch", "4", "--gate-min-guard", "12"]
BATCH = 4  # episodes per packet
K = 4  # teacher proposals per packet
SEED = 0
HELDOUT_SEED = 1000  # other seeds than training: held-out episodes are new episodes


#: the templates of stage 1's best patch the deployed harness keeps, where it keeps only some
#: (BENCHMARKS.md "A deployed harness with headroom"). WebShop's whole patch scripts every step
#: of its wins (59 of 59 success steps forced: search, item, options, purchase) and no engineer
#: patch could change an outcome on top of it (every delta of the table measured against it 0;
#: the reference patch on top: 12 -> 11/20).
#: The incumbent keeps the search and the item choice; the item page (options, purchase) is
#: left to the target, which never acts there (SmolLM2-135M writes prose on every item page:
#: 0/16 training tasks; 0/8 with the valid actions listed before each decision), so a patch
#: wins by finishing the purchase. Measured on the training split (16 tasks, BENCHMARKS.md
#: "A deployed harness with headroom"): search+item 0/16, item+options+purchase 7/16.
DEPLOYED_TEMPLATES: dict[str, tuple[str, ...]] = {"webshop": ("ws_force_search", "ws_click_best")}
#: envs whose deployed harness is written by hand, the committed `<env>-incumbent.txt`, with
#: the template calls `--stages deployed` puts on top of it on the training split (what it
#: leaves a one-template patch to win). ALFWorld: one round of the teacher won no
#: game (stage 1: 0 of 16 proposals), so its deployed harness was the base one, under which no
#: engineer's patch won either (every ALFWorld delta of the table 0) while the reference
#: explorer wins 7/20 held-out games (headroom). Its incumbent is now the issue's other kind,
#: "base plus the action-validity parts of a reference patch": the search of the reference
#: explorer (`alfworld_explorer`): an inadmissible command, or one that only moves or looks,
#: becomes a visit to the likeliest unvisited place, or to the goal's receptacle once the
#: object is held. Taking, opening, treating and placing are left to the target, which never
#: does them (0/16 training games, the same as the base harness); `alfworld_take_place` on
#: top does them. The search is cut to 225 syntax nodes so that a template link still fits the
#: composed hook's static budget (1,200) on top of it.
HAND_DEPLOYED: dict[str, tuple[str, ...]] = {"alfworld": ("alfworld_take_place(open_closed=True)",)}


#: the SFT engineer kept in the repository (adapter and metadata: ~7 MB, no task data), so a
#: later run goes on to GRPO without an hour of restore and SFT
COMMITTED_SFT = COMMITTED / "sft-engineer"
#: the engineer of the JSON output format (318 steps: three epochs over the same rows, written
#: as `<patch>{json}</patch>`), committed: the SFT of the sectioned format starts from it, the
#: same patches written another way, instead of from the base model
WARM_START = COMMITTED / "sft-engineer-json"
#: the SFT+GRPO engineer kept in the repository, with the lineage it was trained from
COMMITTED_GRPO = COMMITTED / "grpo-engineer"
#: a paused GRPO run's checkpoint (`carry_checkpoint`), continued by the next run, on this host
#: or another
CARRIED_GRPO = COMMITTED / "grpo-checkpoint"
#: the SFT+GRPO+RFT engineer kept in the repository, with what it continued and was taught
COMMITTED_RFT = COMMITTED / "rft-engineer"


#: the hand-written reference patch per env (`harness_r1/sandbox/reference_patches/`): never a
#: training target, only the headroom stage's yardstick
REFERENCE = {
    "webshop": "webshop_shopper",
    "dbbench": "dbbench_lookup",
    "alfworld": "alfworld_explorer",
}
