"""Issue 20, the engineer's value at CPU scale: the paper's comparison on held-out tasks.

    .venv/bin/python benchmarks/engineer_value.py --stages all [--envs ...] [--out DIR]
    .venv/bin/python benchmarks/engineer_value.py --stages coldstart,sft   # some stages
    .venv/bin/python benchmarks/engineer_value.py --stages coldstart --envs webshop   # packets
    .venv/bin/python benchmarks/engineer_value.py --stages coldstart,grpo,engineers \
        --target-policy runs/engineer-value/coevolution/target-DIGEST/tuned-v0001 \
        --out runs/ev-tuned [--envs webshop --grpo-steps 20]

A cold start of some envs gives their packets (GRPO on them) but no SFT dataset, which is always
all three envs. `--target-policy` runs every stage against another target: above, the
coevolution stage's tuned checkpoint, the paper's engineer retrained against the tuned target
"from the same cold start" (the committed SFT engineer; the cold start against the tuned
target is packets only, its failures, which GRPO trains on: no teacher round). Its results
go to a repository folder of their own (`results_home`: against-target-DIGEST-tuned-v0001-
VERSION/, VERSION the checkpoint's content).
`--grpo-steps` sets GRPO's optimizer steps where a session cannot hold GRPO_ARGS' 100.

Every step is a `harness-r1` command (printed, and kept with its wall time in DIR/commands.log).
Stages, per env (ALFWorld train / valid_seen, DBBench standard / dev, WebShop goals 0-39 /
40-59; held-out tasks never reach a packet, a cold-start row or a GRPO group: asserted on the
files):
- baselines: the frozen target on the training split (base harness); one round of the template
  teacher on its failures (`train coldstart`, K per packet, canaried on the packet's tasks): the
  kept patch with the best delta (whole, or the part DEPLOYED_TEMPLATES keeps) is the
  **incumbent**, the deployed harness every engineer is trained and judged against
  (`<env>-incumbent.txt`, also committed; written by hand where HAND_DEPLOYED says so,
  ALFWorld's, and then no teacher round runs); on the held-out split the
  base harness, the incumbent, and the incumbent with Self-Refine. With `--teacher` (stage 2)
  the teacher on held-out packets as in the first report.
- deployed: how the incumbent was chosen where it keeps only part of stage 1's best patch
  (DEPLOYED_TEMPLATES): the target on the training split under each subset of its templates;
  for a hand-written one (HAND_DEPLOYED): base, incumbent, incumbent + the template it leaves
  to a patch, the whole reference patch.
- coldstart: the engineers' cold start. The target on COLDSTART_TASKS training tasks under the
  incumbent; the template teacher's one-template proposals on its failures, composed onto the
  incumbent and canaried against it; the lean prompt. Its kept rows go into the repository
  without prompts (no task data), and a later run rebuilds the prompts from regenerated runs
  instead of paying the canary again (`restore_coldstart`).
- sft: LoRA SFT of SmolLM2-135M on the merged rows, every checkpoint kept; each checkpoint's
  valid fraction on held-out packets without a canary (the SFT curve, PNG).
- grpo: online GRPO from the SFT engineer on the cold start's packets (reward: canary delta
  over the incumbent). `--grpo-minutes M`: pause before M minutes and commit the checkpoint;
  the next run (another session, another host) continues it.
- rft: rejection-sampling fine-tuning, the SFT+GRPO engineer continued by SFT on the cold
  start's rows that beat the incumbent in their canary (`--envs`: whose rows), each env's
  rows repeated round(largest env's count / its count) times.
- engineers: the table's engineer rows on held-out packets against the incumbent (untrained,
  template teacher, SFT, SFT+GRPO, SFT+GRPO+RFT): valid fraction, mean canary delta, proposals
  the gate promotes (guard: the other held-out tasks), held-out success after the best
  promoted patch.
- headroom: the held-out success under the incumbent with the env's hand-written reference
  patch on top (never trained on): how much a patch could still win on these tasks.
- ablation: the most trained engineer with each hook removed from what it may write.
- transfer: Gemma 3 270M as the target, under the incumbent and each engineer's best patch.
- coevolution: the target fine-tuned on its own successes under the deployed harness (the
  incumbent plus the final engineer's best promoted patch), held out under the base harness,
  the incumbent and the deployed harness, beside the frozen target.
- reach: what the trained engineers (`--engineers`) sample at K=16, temperature 1.0 on the
  held-out packets (validity only), counted by template: which calls GRPO's reward can reach.

Resumable: a step whose output exists is skipped (delete an output to redo it); training runs
resume from their last checkpoint. Results: DIR/results-*.json, tables on stdout, PNGs in DIR.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shlex
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness_r1.cli.train import PAUSED_EXIT, PAUSED_FILE
from harness_r1.harness.evaluation import wilson_interval

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
COMMITTED = Path(__file__).parent / "results" / "engineer_value"
#: the engineers' SFT: epochs over the cold start, 2 rows a step, a checkpoint every 25 steps
#: (all kept: the validity curve's points). Two epochs left the held-out valid fraction at 2/12
#: (session 2026-12-05 (8): the 135M engineer loops or breaks the JSON), far from the issue's
#: 80%; raising SFT_EPOCHS extends the run from its last checkpoint (the run is asked for a
#: step budget, epochs x steps an epoch, and `train sft` resumes a run whose budget grew), or
#: continues the committed engineer from its adapter, and publishes a new version. Since the
#: sectioned output format (session 11) the SFT starts from WARM_START, the three epochs of the
#: same rows written as JSON, and trains SFT_EPOCHS more on the rows as written now
SFT_EPOCHS = 1
#: bf16 autocast on CPU: 1.39x as fast a step as fp32 on an AMD EPYC with AVX512-BF16, the
#: loss the same to 1% (benchmarks/train_precision.py; BENCHMARKS.md "Training in bf16 on CPU");
#: the first 212 steps of the committed engineer were fp32
SFT_ARGS = ["--batch-size", "2", "--learning-rate", "4e-4",
            "--save-steps", "25", "--keep-checkpoints", "0", "--cpu-bf16"]  # fmt: skip
#: how the SFT validity curve samples on held-out packets (as the CPU engineer runs: 0.5 keeps
#: a 135M engineer in the teacher's shape; every point since session 8 at it) and how many
#: packets per env it uses
CURVE_SAMPLING = ["--temperature", "0.5", "--seed", "0", "--max-new-tokens", "512"]
#: how every engineer of the table samples its K proposals (session 12's choice): 0.2. The
#: sweep (`--stages sampling`) of the SFT engineer gave 24/24 valid greedy but one distinct
#: proposal per packet (best-of-K would be best-of-1), 21/24 (88%) at 0.2 with 1-4 distinct
#: proposals a packet, 15/24 (62%) at 0.5: 0.2 keeps most proposals valid and still gives the
#: gate more than one patch to choose from. The same for every engineer (the untrained one
#: too); GRPO samples at 0.8 (GRPO_ARGS), spread within a group being its signal
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
#: GRPO_ARGS' 100, e.g. the coevolution retrain, which a session cannot hold at 100 steps
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
    target (`results_home`: what BENCHMARKS.md cites, since DIR does not outlive a session).
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
        from harness_r1.harness.policies.local_models import checkpoint_version

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


#: the commands that run the frozen target: without `--target-policy` they run the embedded
#: base model these results were measured on (the CLI's default target is the deployed agent)
TARGET_COMMANDS = (("eval",), ("canary",), ("train", "coldstart"), ("engineer", "evaluate"),
                   ("train", "grpo"))  # fmt: skip


def on_base_target(command: list[str]) -> list[str]:
    """`command` with `--policy smollm2` when it runs the target and names none."""
    runs_target = any(tuple(command[1 : 1 + len(c)]) == c for c in TARGET_COMMANDS)
    if command[:1] == [HR] and runs_target and "--policy" not in command:
        return [*command, "--policy", "smollm2"]
    return command


def run(command: list[str], log: Path, paused_ok: bool = False) -> bool:
    """Run and log `command`; False when it paused at its time budget (`paused_ok`)."""
    command = on_base_target(command)
    line = " ".join(shlex.quote(part) for part in command)
    print(f"$ {line}", flush=True)
    started = time.perf_counter()
    code = subprocess.run(command, check=False).returncode
    paused = paused_ok and code == PAUSED_EXIT
    if code and not paused:
        raise subprocess.CalledProcessError(code, command)
    with log.open("a", encoding="utf-8") as handle:
        note = " (paused)" if paused else ""
        handle.write(f"{line}  # {time.perf_counter() - started:.0f} s{note}\n")
    return not paused


def target_runs(
    env: str, split: str, limit: int, seed: int, extra: list[str], path: Path, log: Path
) -> Path:
    """The frozen target's runs (`harness-r1 eval`, TARGET settings, `extra` e.g. `--on`) into
    `path`, unless they are there already, all of them: `eval` writes each episode as it ends,
    so a stopped run leaves a short file (even an empty one), which runs again."""
    if not path.exists() or len(trajectories(path)) < episodes_of(env, split, limit):
        run([HR, "eval", "--env", env, "--split", split, "--limit", str(limit), "--seed",
             str(seed), *TARGET, *TARGET_POLICY, *extra, "--out", str(path)], log)  # fmt: skip
    return path


def episodes_of(env: str, split: str, limit: int) -> int:
    """How many episodes `eval --limit` runs on the split: `limit`, or all of a smaller split."""
    from harness_r1.envs import get_suite
    from harness_r1.envs.data import default_data_root

    root = default_data_root()
    assert root is not None, "no data root (../shared/benchmarks)"
    return min(limit, len(get_suite(env).load_tasks(root, split)))


def heldout_target_runs(env: str, extra: list[str], path: Path, log: Path) -> Path:
    """The target on the env's held-out tasks (HELDOUT_TASKS of them, HELDOUT_SEED)."""
    return target_runs(env, SPLITS[env][1], HELDOUT_TASKS[env], HELDOUT_SEED, extra, path, log)


def trajectories(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def rate(path: Path) -> dict[str, Any]:
    rows = trajectories(path)
    wins = sum(1 for row in rows if row["outcome"]["success"])
    low, high = wilson_interval(wins, len(rows))
    return {"n": len(rows), "successes": wins, "rate": wins / len(rows), "ci": [low, high]}


def best_kept(dataset: Path) -> dict[str, Any] | None:
    """The kept cold-start row with the best canary delta (then mean reward, then the
    shortest completion: the simplest of equals)."""
    rows = trajectories(dataset) if dataset.exists() else []
    scored = [r for r in rows if r["metadata"].get("delta_success") is not None]
    if not scored:
        return None
    return max(
        scored,
        key=lambda r: (
            r["metadata"]["delta_success"],
            r["metadata"].get("delta_mean_reward") or 0.0,
            -len(r["completion"][-1]["content"]),
        ),
    )


def assert_held_out(env: str, out: Path) -> None:
    """No held-out task in the training runs or in any cold-start packet or canary batch."""
    train, heldout = SPLITS[env]
    held = {row["task"]["task_id"] for row in trajectories(out / f"{env}-heldout-base.jsonl")}
    trained = {row["task"]["task_id"] for row in trajectories(out / f"{env}-train-base.jsonl")}
    stage1 = out / f"{env}-coldstart" / "packets.jsonl"  # none for a hand-written incumbent
    packets = trajectories(stage1) if stage1.exists() or env not in HAND_DEPLOYED else []
    canaried = {task_id for row in packets for task_id in row["task_ids"]}
    splits = {split for row in packets for split in row["splits"]}
    assert not held & trained, f"{env}: held-out tasks in the training runs: {held & trained}"
    assert not held & canaried, f"{env}: held-out tasks canaried: {held & canaried}"
    assert splits <= {train} and heldout not in splits, f"{env}: packets from {splits}"


def stage_one(env: str, out: Path, log: Path) -> dict[str, Any]:
    if env in HAND_DEPLOYED:
        return stage_one_hand(env, out, log)
    train, heldout = SPLITS[env]
    base_train = out / f"{env}-train-base.jsonl"
    target_runs(env, train, TRAIN_TASKS[env], SEED, [], base_train, log)
    coldstart = out / f"{env}-coldstart"
    if not (coldstart / "stats.json").exists():
        run([HR, "train", "coldstart", str(base_train), "--env", env, "--split", train,
             "--out", str(coldstart), "-k", str(K), "--batch-size", str(BATCH),
             "--baseline-cache", str(out / "baselines"), *TARGET, *TARGET_POLICY],
            log)  # fmt: skip
    incumbent_file = out / f"{env}-incumbent.txt"
    best = best_kept(coldstart / "dataset.jsonl")
    if best is not None and best["metadata"]["delta_success"] > 0:
        text = best["completion"][-1]["content"]
        (out / f"{env}-stage1-best.txt").write_text(text, encoding="utf-8")
        incumbent_file.write_text(deployed_part(env, text), encoding="utf-8")
    on = ["--on", str(incumbent_file)] if incumbent_file.exists() else []
    stats = json.loads((coldstart / "stats.json").read_text())
    return {
        "env": env,
        "splits": {"train": train, "heldout": heldout},
        "train_base": rate(base_train),
        "coldstart": {"proposals": stats.get("proposals"), "kept": stats.get("kept")},
        "incumbent": None
        if best is None or not on
        else {
            "templates": list(DEPLOYED_TEMPLATES[env])
            if env in DEPLOYED_TEMPLATES
            else best["metadata"].get("templates"),
            "stage1_best_templates": best["metadata"].get("templates"),
            "delta_success": best["metadata"]["delta_success"],
            "description": best["metadata"].get("description"),
        },
        "heldout": heldout_baselines(env, on, out, log),
    }


def stage_one_hand(env: str, out: Path, log: Path) -> dict[str, Any]:
    """Stage 1 of an env whose incumbent is written by hand (HAND_DEPLOYED): no teacher round
    to choose one (the round it replaced is in the committed results, kept), the held-out
    baselines under it."""
    train, heldout = SPLITS[env]
    base_train = out / f"{env}-train-base.jsonl"
    target_runs(env, train, TRAIN_TASKS[env], SEED, [], base_train, log)
    before = committed_results(f"results-{env}.json")
    return {
        "env": env,
        "splits": {"train": train, "heldout": heldout},
        "train_base": rate(base_train),
        "coldstart": before.get("coldstart"),  # the teacher round that won nothing
        "incumbent": {
            "hand_written": f"{env}-incumbent.txt",
            "left_to_a_patch": list(HAND_DEPLOYED[env]),
        },
        "heldout": heldout_baselines(env, incumbent_on(env, out), out, log),
    }


def heldout_baselines(env: str, on: list[str], out: Path, log: Path) -> dict[str, Any]:
    """The held-out success under the base harness, the incumbent (`on`), and the incumbent
    with Self-Refine; only the base when there is no incumbent."""
    rows: dict[str, Any] = {}
    refine = [*on, "--self-refine"]
    conditions = [("base", []), ("incumbent", on), ("incumbent+self-refine", refine)]
    for name, extra in conditions:
        if name != "base" and not on:
            continue  # no incumbent: the base harness is the deployed one (said in results)
        path = out / f"{env}-heldout-{name}.jsonl"
        rows[name] = rate(heldout_target_runs(env, extra, path, log))
    assert_held_out(env, out)
    return rows


#: the templates of stage 1's best patch the deployed harness keeps, where it keeps only some
#: (session 13). WebShop's whole patch scripts every step of its wins (59 of 59 success steps
#: forced: search, item, options, purchase) and no engineer patch could change an outcome on
#: top of it (every delta of session 12's table 0; the reference patch on top: 12 -> 11/20).
#: The incumbent keeps the search and the item choice; the item page (options, purchase) is
#: left to the target, which never acts there (SmolLM2-135M writes prose on every item page:
#: 0/16 training tasks; 0/8 with the valid actions listed before each decision), so a patch
#: wins by finishing the purchase. Measured on the training split (16 tasks, BENCHMARKS.md
#: "A deployed harness with headroom"): search+item 0/16, item+options+purchase 7/16.
DEPLOYED_TEMPLATES: dict[str, tuple[str, ...]] = {"webshop": ("ws_force_search", "ws_click_best")}
#: envs whose deployed harness is written by hand, the committed `<env>-incumbent.txt`, with
#: the template calls `--stages deployed` puts on top of it on the training split (what it
#: leaves a one-template patch to win). ALFWorld (session 16): one round of the teacher won no
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


def deployed_part(env: str, text: str) -> str:
    """Stage 1's best patch (`text`, the teacher's completion) as the env's incumbent: whole,
    or re-rendered with only DEPLOYED_TEMPLATES' templates (same parameters, same order)."""
    from harness_r1.trainer.prompt import render_completion
    from harness_r1.trainer.teacher import TemplateTeacher
    from harness_r1.trainer.templates import RenderContext

    keep = DEPLOYED_TEMPLATES.get(env)
    if keep is None:
        return text
    patch, every = stage1_choices(env, text)
    chosen = [c for c in every if c.name in keep]
    assert sorted(c.name for c in chosen) == sorted(keep), f"{env}: {patch.description}"
    for choice in chosen:  # the same code: a template that reads the packet would differ
        body = choice.template.render(dict(choice.params), RenderContext(env=env)).split("\n", 1)
        live = patch.code_for(choice.template.hook) or ""
        assert body[1] in live, f"{env}: {choice.name} renders other code than stage 1's"
    part = TemplateTeacher().render_patch(env, chosen)
    purposes = " ".join(f"{c.name} on {c.template.hook}: {c.template.purpose}." for c in chosen)
    return render_completion(part, f"The deployed part of stage 1's best patch. {purposes}")


def stage1_choices(env: str, text: str) -> tuple[Any, list[Any]]:
    """Stage 1's best patch (the teacher's completion `text`) and its template choices."""
    from harness_r1.sandbox.parse import parse_engineer_output
    from harness_r1.trainer.teacher import choices_in

    patch = parse_engineer_output(text, env=env).patch
    assert patch is not None, f"{env}: stage 1's best patch does not parse"
    chosen = choices_in(patch.description)
    assert chosen, f"{env}: stage 1's best patch names no template"
    return patch, chosen


def incumbent_digest(env: str, out: Path) -> str:
    """The env's incumbent now, by content: its patch's SHA-256 (`Patch.sha256`, the think
    text left out), or "base"."""
    from harness_r1.sandbox.patchfile import load_patch_file

    on = incumbent_on(env, out)
    return load_patch_file(Path(on[1]), env).sha256() if on else "base"


def canaried_digest(folder: Path) -> str:
    """What a cold start's candidates were canaried against, as `train coldstart` recorded it
    in each packet (the incumbent's links), in `incumbent_digest`'s terms."""
    from harness_r1.contracts import Patch

    digests = {
        "+".join(Patch.model_validate(link["patch"]).sha256() for link in row["incumbent"]["links"])
        or "base"
        for row in trajectories(folder / "packets.jsonl")
    }
    assert len(digests) == 1, f"{folder}: packets canaried against {len(digests)} incumbents"
    return digests.pop()


def incumbent_on(env: str, out: Path) -> list[str]:
    """`--on` for the env's incumbent: stage 1's file in DIR, else the committed one (the
    incumbent is a patch, no task data, so it is kept in the repository; stage 1 need not be
    rerun to train against it). No incumbent (ALFWorld): the base harness, []."""
    path = out / f"{env}-incumbent.txt"
    committed = COMMITTED / path.name
    if not path.exists() and committed.exists():
        path.write_text(committed.read_text(encoding="utf-8"), encoding="utf-8")
    return ["--on", str(path)] if path.exists() else []


def heldout_task_ids(env: str) -> set[str]:
    """Every task id of the env's held-out split (not only the ones run): none may be trained on."""
    from harness_r1.envs import get_suite
    from harness_r1.envs.data import default_data_root

    root = default_data_root()
    assert root is not None, "no data root (../shared/benchmarks)"
    return {task.task_id for task in get_suite(env).load_tasks(root, SPLITS[env][1])}


def assert_packets_train_only(env: str, folder: Path) -> None:
    assert_train_only(env, trajectories(folder / "packets.jsonl"))


def assert_train_only(env: str, packets: list[dict[str, Any]]) -> None:
    """No packet row of `env` canaries a held-out task or one outside the training split."""
    train, heldout = SPLITS[env]
    canaried = {task_id for row in packets for task_id in row["task_ids"]}
    leaked = canaried & heldout_task_ids(env)
    assert not leaked, f"{env}: held-out tasks in the engineers' cold start: {sorted(leaked)[:5]}"
    splits = {split for row in packets for split in row["splits"]}
    assert splits <= {train}, f"{env}: cold-start packets from {splits}"


def stage_coldstart(env: str, out: Path, log: Path) -> dict[str, Any]:
    """Stage 3: the engineers' cold start. The target on COLDSTART_TASKS training tasks under the
    incumbent; its failures in packets of BATCH; K template-teacher proposals per packet, each
    composed onto the incumbent and canaried against it; the lean prompt in every row."""
    train, _ = SPLITS[env]
    on = incumbent_on(env, out)
    runs = out / f"{env}-train-incumbent.jsonl"
    target_runs(env, train, COLDSTART_TASKS[env], SEED, on, runs, log)
    folder = out / f"{env}-engineer-coldstart"
    if TARGET_POLICY:
        packets_only(env, out, runs)
    elif not (folder / "stats.json").exists() and not restore_coldstart(env, out, runs):
        run([HR, "train", "coldstart", str(runs), "--env", env, "--split", train,
             "--out", str(folder), "-k", str(K), "--batch-size", str(BATCH), *on,
             *COLDSTART_EXTRA, "--baseline-cache", str(out / "baselines"), *TARGET,
             *TARGET_POLICY],
            log)  # fmt: skip
    assert_packets_train_only(env, folder)
    canaried, now = canaried_digest(folder), incumbent_digest(env, out)
    assert canaried == now, f"{folder} was canaried against another incumbent: delete it to redo"
    stats = json.loads((folder / "stats.json").read_text())
    if not stats.get("restored"):
        export_coldstart(env, out, canaried)
    dataset = folder / "dataset.jsonl"
    kept = trajectories(dataset) if dataset.exists() else []  # none: `packets_only`
    deltas = [row["metadata"]["delta_success"] for row in kept]
    return {
        "train_runs_under_incumbent": rate(runs),
        "packets": stats.get("packets"),
        "proposals": stats.get("proposals"),
        "kept": stats.get("kept"),
        "rejected": stats.get("rejected"),
        "kept_mean_delta": sum(deltas) / len(deltas) if deltas else None,
        "kept_improving": sum(d > 0 for d in deltas),
        "kept_templates": stats.get("kept_templates"),
    }


def export_coldstart(env: str, out: Path, incumbent_sha256: str) -> int:
    """The env's kept rows without their prompts, into the repository (COMMITTED): the
    teacher's completions and their canary provenance hold no task data (asserted: no ten words
    in a row of a packet's task instruction appear in a completion; DBBench's boilerplate "the
    name of this table is" is shorter), the prompts do. `restore_coldstart`
    rebuilds the prompts from regenerated training runs, so a later session trains on the
    same rows without paying the canary again. `incumbent_sha256`: what the canary ran against
    (`canaried_digest`), kept in each row."""
    if TARGET_POLICY:
        return 0  # another target's cold start is packets only (`packets_only`): no rows
    folder = out / f"{env}-engineer-coldstart"
    packets = {row["packet_id"]: row for row in trajectories(folder / "packets.jsonl")}
    rows = []
    for row in trajectories(folder / "dataset.jsonl"):
        text = " ".join(re.findall(r"\w+", row["completion"][-1]["content"].lower()))
        for episode in packets[row["metadata"]["packet_id"]]["packet"]["episodes"]:
            words = re.findall(r"\w+", episode["instruction"].lower())
            for start in range(max(0, len(words) - 9)):  # ten words in a row: task text
                shingle = " ".join(words[start : start + 10])
                assert shingle not in text, f"{env}: a completion holds task text: {shingle!r}"
        meta = {**row["metadata"], "incumbent_sha256": incumbent_sha256}
        rows.append({"completion": row["completion"], "metadata": meta})
    path = COMMITTED / "coldstart" / f"{env}-rows.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return len(rows)


def restore_coldstart(env: str, out: Path, runs: Path) -> bool:
    """The env's cold start from the committed rows: packets rebuilt from `runs` (the training
    runs under the incumbent, regenerated), prompts from the packets. Writes the folder `train
    coldstart` would (dataset.jsonl, packets.jsonl, stats.json with `restored`); False when
    nothing is committed or the rows were canaried against another incumbent than the env's
    now (`incumbent_sha256` in each row). The committed rows are only read.

    A row finds its packet by the tasks its canary ran (`task_ids` in its metadata), else by
    packet id, else by the packet sharing most of its tasks (at least half): greedy text is
    reproducible on one CPU kind, not across them (bf16 kernels differ: DBBench's and
    ALFWorld's runs regenerated on an AMX host differed from the AVX512 host's), so an outcome
    can flip and change which of a chunk's tasks fail, hence the packet's task set, by one. Such
    a row keeps its canary delta (measured on its own tasks) and gets the prompt of the
    regenerated packet of the same chunk. Rows without a packet are dropped and counted; how
    each row was matched is in stats.json."""
    committed = COMMITTED / "coldstart" / f"{env}-rows.jsonl"
    if TARGET_POLICY or not committed.exists():  # the committed rows were canaried on SmolLM2
        return False
    committed_rows = trajectories(committed)
    against = {row["metadata"].get("incumbent_sha256") for row in committed_rows}
    if against != {incumbent_digest(env, out)}:
        print(f"{env}: the committed cold start was canaried against another incumbent "
              f"({sorted(map(str, against))}): it runs again")  # fmt: skip
        return False
    from harness_r1.trainer.prompt import PromptConfig, engineer_messages

    sources = training_sources(env, out, runs)
    rows, missing, how = [], 0, Counter[str]()
    used: dict[str, Any] = {}
    for row in committed_rows:
        way, source = packet_of(row["metadata"], sources)
        if source is None:
            missing += 1
            continue
        how[way] += 1
        used[source.packet.packet_id] = source
        prompt = engineer_messages(source.packet, config=PromptConfig(lean=True))
        meta = {**row["metadata"], "packet_id": source.packet.packet_id,
                "committed_packet_id": row["metadata"]["packet_id"]}  # fmt: skip
        rows.append({"prompt": prompt, **row, "metadata": meta})
    folder = out / f"{env}-engineer-coldstart"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dataset.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_packets(folder, list(used.values()))
    stats = {"restored": True, "packets": len(used), "kept": len(rows), "missing_rows": missing,
             "matched_by": dict(how)}  # fmt: skip
    (folder / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    print(f"{env}: restored {len(rows)} rows of {len(used)} packets ({missing} not rebuilt; "
          f"matched by {dict(how)})")  # fmt: skip
    return True


def training_sources(env: str, out: Path, runs: Path) -> list[Any]:
    """The packet sources `train coldstart` would draw from `runs` (the training runs under the
    incumbent): their failures in packets of BATCH, each with its canary batch and incumbent."""
    from harness_r1.cli.jobs.canary import load_incumbent
    from harness_r1.envs.data import default_data_root
    from harness_r1.trainer.coldstart_sources import SourceConfig, sources_from_runs

    on = [Path(p) for p in incumbent_on(env, out)[1::2]]
    root = default_data_root()
    assert root is not None
    config = SourceConfig(batch_size=BATCH, incumbent=load_incumbent(on, env))
    return sources_from_runs([runs], env, SPLITS[env][0], root, config)


def packets_only(env: str, out: Path, runs: Path) -> None:
    """The cold start against another target (`--target-policy`): its failures' packets for
    GRPO, without the teacher's proposals and their canary. The engineer retrained against
    that target starts from the committed SFT engineer, "from the same cold start" (issue 20):
    its rows stand, so a teacher round against the new target would teach nothing and cost
    ~15-50 min an env. Writes packets.jsonl and stats.json (`packets_only`), no dataset; kept
    when they are this target's (DIR's run files are keyed by name: another target's run
    into the same DIR must not take them for its own)."""
    folder = out / f"{env}-engineer-coldstart"
    stats_file = folder / "stats.json"
    if stats_file.exists():
        target = json.loads(stats_file.read_text()).get("target")
        assert target == target_name(), f"{folder} holds {target}'s packets: use a fresh --out"
        return
    sources = training_sources(env, out, runs)
    assert sources, f"{env}: the target failed no training task under the incumbent: no packet"
    folder.mkdir(parents=True, exist_ok=True)
    write_packets(folder, sources)
    stats = {"packets_only": True, "packets": len(sources), "target": target_name()}
    (folder / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    print(f"{env}: {len(sources)} packets of the target's failures, no teacher round")


def write_packets(folder: Path, sources: list[Any]) -> None:
    """The packet sources as `train coldstart` writes them (packets.jsonl)."""
    from harness_r1.trainer.coldstart import packet_row

    rows = "".join(json.dumps(packet_row(source)) + "\n" for source in sources)
    (folder / "packets.jsonl").write_text(rows)


def packet_of(meta: dict[str, Any], sources: list[Any]) -> tuple[str, Any]:
    """(how, source) for a committed row: its canary's exact task set, its packet id, or the
    unique source sharing the most of its tasks (at least half); ("", None) when none does."""
    tasks = set(meta.get("task_ids") or ())
    for source in sources:
        if tasks and set(source_tasks(source)) == tasks:
            return "tasks", source
    for source in sources:
        if source.packet.packet_id == meta["packet_id"]:
            return "packet id", source
    shared = sorted(((len(tasks & set(source_tasks(s))), i) for i, s in enumerate(sources)),
                    reverse=True)  # fmt: skip
    best = shared[0][0] if shared else 0
    unique = len(shared) == 1 or (len(shared) > 1 and shared[1][0] < best)
    if tasks and 2 * best >= len(tasks) and unique:
        return "most shared tasks", sources[shared[0][1]]
    return "", None


def source_tasks(source: Any) -> tuple[str, ...]:
    """The task ids a packet source's canary runs, sorted."""
    return tuple(sorted(task.task_id for task in source.tasks))


def merge_coldstart(envs: list[str], out: Path) -> int:
    """All envs' kept rows in one SFT dataset (env order, then file order: deterministic), each
    prompt rebuilt from its packet by the current lean prompt (what the engineer will read at
    evaluation and in GRPO, even if the prompt changed since the rows were written) and each
    completion written in the current output format (`current_format`)."""
    rows = [row for env in envs for row in coldstart_rows(env, out)]
    path = out / "engineer-coldstart.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return len(rows)


def coldstart_rows(env: str, out: Path) -> list[dict[str, Any]]:
    """The env's kept cold-start rows in file order, each prompt rebuilt from its packet by the
    current lean prompt and each completion in the current output format (`merge_coldstart`)."""
    from harness_r1.contracts import FailurePacket
    from harness_r1.trainer.prompt import PromptConfig, engineer_messages

    folder = out / f"{env}-engineer-coldstart"
    packets = {
        row["packet_id"]: FailurePacket.model_validate(row["packet"])
        for row in trajectories(folder / "packets.jsonl")
    }
    rows = []
    for row in trajectories(folder / "dataset.jsonl"):
        packet = packets[row["metadata"]["packet_id"]]
        prompt = engineer_messages(packet, config=PromptConfig(lean=True))
        completion = current_format(row["completion"], env)
        rows.append({**row, "prompt": prompt, "completion": completion})
    return rows


def current_format(completion: list[dict[str, str]], env: str) -> list[dict[str, str]]:
    """A teacher's completion written in the current output format: since session 14 a
    template call (`harness_r1.trainer.template_calls`: the think block and the description
    line naming the templates and their parameters, no code), which renders the teacher's
    patch; the committed rows were written as `<patch>{json}</patch>`. The think line is
    carried over as written; the template choices are the same (asserted: the call renders a
    patch with the row's description). A template that adapts to the packet (ALFWorld's
    and WebShop's skills, DBBench's hints by query type) renders its general form from a call
    (`call_renders_as_canaried` counts those rows); the choice the row teaches is the same."""
    from harness_r1.sandbox.parse import parse_engineer_output
    from harness_r1.trainer.template_calls import call_of, template_call

    parsed = parse_engineer_output(completion[-1]["content"], env=env)
    if parsed.patch is None:
        raise ValueError(f"{env}: a committed row does not parse: {parsed.message}")
    text = call_of(parsed.patch, parsed.think)
    if text is None:
        raise ValueError(f"{env}: a committed row is no template teacher's patch")
    call = template_call(text, env)
    if call is None or call.patch is None or call.patch.description != parsed.patch.description:
        raise ValueError(f"{env}: a committed row's call does not render its templates")
    return [*completion[:-1], {**completion[-1], "content": text}]


def call_renders_as_canaried(completion: list[dict[str, str]], env: str) -> bool:
    """Whether a committed row's call (`current_format`) renders the very patch its canary ran."""
    from harness_r1.sandbox.parse import parse_engineer_output
    from harness_r1.trainer.template_calls import template_call

    canaried = parse_engineer_output(completion[-1]["content"], env=env).patch
    call = template_call(current_format(completion, env)[-1]["content"], env)
    return call is not None and call.patch == canaried


def heldout_runs(env: str, out: Path, log: Path) -> Path:
    """The held-out runs under the deployed harness (stage 1's file; the same command): the
    failures the engineers are scored on."""
    on = incumbent_on(env, out)
    path = out / f"{env}-heldout-{'incumbent' if on else 'base'}.jsonl"
    return heldout_target_runs(env, on, path, log)


#: the SFT engineer kept in the repository (adapter, tokenizer, metadata: ~10 MB, no task
#: data), so a later session goes on to GRPO without an hour of restore and SFT
COMMITTED_SFT = COMMITTED / "sft-engineer"
#: the engineer of the JSON output format (318 steps: three epochs over the same rows, written
#: as `<patch>{json}</patch>`), committed in session 10: the SFT of the sectioned format starts
#: from it, the same patches written another way, instead of from the base model
WARM_START = COMMITTED / "sft-engineer-json"


def rows_digest(dataset: Path) -> str:
    """SHA-256 of a dataset's rows in order, each as its system message and its completion:
    the teacher's patches SFT teaches, which the committed rows fix, and the system prompt they
    were taught under, which the code fixes (session 17's template menu changed it: an engineer
    trained without the menu is not the one the rows now teach). The user messages are left
    out: a restore rebuilds them from regenerated runs, which differ on another kind of CPU
    (stage 4 in BENCHMARKS.md) while the rows are the same; the metadata too (a restore adds
    to it)."""
    return _rows_digest(
        [(row["prompt"][0]["content"], row["completion"]) for row in trajectories(dataset)]
    )


def _rows_digest(rows: list[Any]) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


@functools.cache
def committed_rows_digest(envs: tuple[str, ...] = DEFAULT_ENVS) -> str:
    """`rows_digest` of the dataset a restore of the committed rows would merge (`envs` in the
    default order, each completion in the current format under the current lean system
    prompt), computed without the restore: the rows' completions are committed, only their
    user messages need the regenerated runs."""
    return taught_digest([(env, row) for env in envs for row in committed_coldstart(env)])


def committed_coldstart(env: str) -> list[dict[str, Any]]:
    """The env's committed cold-start rows (completions and metadata, no prompts)."""
    return trajectories(COMMITTED / "coldstart" / f"{env}-rows.jsonl")


def taught_digest(rows: list[tuple[str, dict[str, Any]]]) -> str:
    """`rows_digest` of (env, committed row) pairs as a dataset would teach them: each
    completion in the current format under the env's current lean system prompt."""
    from harness_r1.trainer.prompt import PromptConfig, system_prompt

    return _rows_digest(
        [
            (
                system_prompt(env, config=PromptConfig(lean=True)),
                current_format(row["completion"], env),
            )
            for env, row in rows
        ]
    )


def sft_version(out: Path) -> Path | None:
    """The published SFT engineer trained on this cold start (its dataset's sha256; the most
    trained of them), else the committed one if it was trained on the same rows
    (`rows_digest`), else None."""
    from harness_r1.trainer.model_io import file_sha256
    from harness_r1.trainer.versions import list_versions, read_metadata

    dataset = out / "engineer-coldstart.jsonl"
    digest = COMMITTED_SFT / "rows-digest.txt"
    if not dataset.exists():  # no restore here: the committed engineer if the rows are its
        if not digest.exists():
            return None
        return COMMITTED_SFT if digest.read_text().strip() == committed_rows_digest() else None
    sha = file_sha256(dataset)
    local = []
    for version in list_versions(out / "engineer"):
        meta = read_metadata(version)
        if meta.get("kind") == "sft" and meta.get("dataset", {}).get("sha256") == sha:
            local.append(version)
    if digest.exists() and digest.read_text().strip() == rows_digest(dataset):
        local.insert(0, COMMITTED_SFT)  # a local run no more trained than it loses to it
    # the most trained; of equals the latest (list_versions is oldest first)
    return max(reversed(local), key=sft_steps) if local else None


def sft_steps(version: Path) -> int:
    """Optimizer steps behind an SFT engineer, those of the adapters it continued from
    included (`train sft --adapter` starts a new run: its `steps` are its own). The committed
    engineer carries its total (`steps_total`), so its lineage need not be on this host."""
    from harness_r1.trainer.versions import read_metadata

    meta = read_metadata(version)
    if "steps_total" in meta:
        return int(meta["steps_total"])
    parent = meta.get("parent_path")
    return int(meta.get("steps", 0)) + (sft_steps(Path(parent)) if parent else 0)


def parent_steps(version: Path) -> int:
    """Steps of the adapter `version`'s run continued from (0: a fresh LoRA)."""
    from harness_r1.trainer.versions import read_metadata

    parent = read_metadata(version).get("parent_path")
    return sft_steps(Path(parent)) if parent else 0


def sft_steps_planned(dataset: Path) -> int:
    """Optimizer steps of the SFT engineer: WARM_START's, then SFT_EPOCHS over `dataset`."""
    return warm_steps() + epoch_steps(len(trajectories(dataset)), SFT_EPOCHS)


def epoch_steps(rows: int, epochs: int) -> int:
    """Optimizer steps of `epochs` passes over `rows` rows at SFT_ARGS' batch size (rows /
    batch, rounded up, an epoch)."""
    batch = int(option_value(SFT_ARGS, "--batch-size"))
    return epochs * -(-rows // batch)


def warm_steps() -> int:
    """Optimizer steps behind WARM_START (0 without one: the SFT starts from the base model)."""
    return sft_steps(WARM_START) if WARM_START.exists() else 0


def commit_sft(version: Path, dataset: Path) -> None:
    """Keep the SFT engineer in the repository (COMMITTED_SFT), with the digest of the rows it
    was trained on (`sft_version` takes it only for the same rows) and its total steps (its
    parent may be the committed engineer it replaces)."""
    import shutil

    if version == COMMITTED_SFT or TARGET_POLICY:
        return
    total = sft_steps(version)

    def note_lineage(copy: Path) -> None:
        meta = json.loads((copy / "metadata.json").read_text())
        meta["steps_total"] = total
        (copy / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        (copy / "rows-digest.txt").write_text(rows_digest(dataset) + "\n")

    shutil.rmtree(COMMITTED_SFT, ignore_errors=True)
    copy_whole(version, COMMITTED_SFT, note_lineage)


def copy_whole(source: Path, dest: Path, prepare: Callable[[Path], None] | None = None) -> None:
    """Copy `source` to `dest` through a staging folder, `prepare(staging)` before the rename:
    `dest` is never a half copy."""
    import shutil

    staging = dest.with_name(dest.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging)
    if prepare is not None:
        prepare(staging)
    staging.rename(dest)


def snapshot(version: Path, out: Path) -> Path:
    """A copy of `version` under DIR to continue from: the committed engineer is replaced
    when the continued one is committed, and a parent must stay what it was."""
    weights = weights_sha(version)[:12]
    copy = out / "sft-parents" / f"steps-{sft_steps(version):04d}-{weights}"
    if not copy.exists():
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy_whole(version, copy)
    return copy


def sft_command(out: Path, adapter: Path | None, steps: int) -> list[str]:
    extra = [] if adapter is None else ["--adapter", str(adapter)]
    return [HR, "train", "sft", str(out / "engineer-coldstart.jsonl"), "--out",
            str(out / "engineer"), "--max-steps", str(steps), *extra, *SFT_ARGS]  # fmt: skip


def stage_sft(envs: list[str], out: Path, log: Path) -> Path:
    """Stage 4a: LoRA SFT of the engineer (SmolLM2-135M) on the merged cold start, SFT_EPOCHS
    epochs, a checkpoint every 25 steps kept (the curve's points). Resumable by `train sft`'s
    run key: the same command continues from the last checkpoint, and a run with fewer steps
    than SFT_EPOCHS now ask for is extended (a new version). An engineer whose run is not on
    this host (the committed one) is continued from its adapter: a new run (its learning-rate
    schedule starts again) for the steps still missing. A first run starts from WARM_START."""
    from harness_r1.trainer.versions import read_metadata

    planned = sft_steps_planned(out / "engineer-coldstart.jsonl")
    version = sft_version(out)
    if version is None:
        warm = snapshot(WARM_START, out) if WARM_START.exists() else None
        run(sft_command(out, warm, planned - warm_steps()), log)
    elif sft_steps(version) < planned:
        meta = read_metadata(version)
        parent = Path(meta["parent_path"]) if meta.get("parent_path") else None
        if version != COMMITTED_SFT and Path(meta["run_dir"]).is_dir():  # extend its run
            run(sft_command(out, parent, planned - parent_steps(version)), log)
        else:
            run(sft_command(out, snapshot(version, out), planned - sft_steps(version)), log)
    version = sft_version(out)
    assert version is not None, "train sft published no version for this cold start"
    return version


def checkpoints(version: Path) -> list[tuple[int, Path]]:
    """(step, adapter dir) of every checkpoint of the run that published `version`."""
    from harness_r1.trainer.versions import read_metadata

    run_dir = Path(read_metadata(version)["run_dir"])
    found = [(int(p.name.rsplit("-", 1)[1]), p) for p in run_dir.glob("checkpoint-*")]
    return sorted(found)


def validity(
    env: str,
    adapter: Path | None,
    name: str,
    out: Path,
    log: Path,
    temperature: float | None = None,
    packets: int = CURVE_PACKETS,
) -> dict[str, Any]:
    """One engineer's validity on the env's held-out packets (no canary: parse, static checks,
    composition onto the incumbent), `packets` packets x K, the curve's fixed sampling (or
    another temperature: the sampling sweep)."""
    sampling = list(CURVE_SAMPLING)
    folder = "sft-curve"
    if temperature is not None:
        sampling[sampling.index("--temperature") + 1] = str(temperature)
        folder = "sampling"
        name = f"{name}-t{temperature}-p{packets}"
    path = out / folder / f"{env}-{name}.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        extra = [] if adapter is None else ["--adapter", str(adapter)]
        run([HR, "engineer", "evaluate", str(heldout_runs(env, out, log)), "--env", env,
             "--split", SPLITS[env][1], *extra, "--validity-only", "--lean-prompt",
             *incumbent_on(env, out), "-k", str(K), "--batch-size", str(BATCH),
             "--limit-packets", str(packets), *sampling,
             "--out", str(path)], log)  # fmt: skip
    summary: dict[str, Any] = json.loads(path.read_text())["summary"]
    return summary


def stage_sft_curve(envs: list[str], out: Path, log: Path) -> list[dict[str, Any]]:
    """Stage 4b: the held-out valid fraction of the engineer the SFT run started from (the base
    model, or WARM_START) and of every SFT checkpoint, per env and pooled, with Wilson 95%
    intervals. Each point's result is kept under the adapter's weights (a later run from
    other weights at the same step count measures again)."""
    from harness_r1.trainer.versions import read_metadata

    version = stage_sft(envs, out, log)
    parent = read_metadata(version).get("parent_path")
    start: tuple[int, Path | None] = (parent_steps(version), Path(parent) if parent else None)
    points: list[tuple[int, Path | None]] = [
        start,
        *((start[0] + step, path) for step, path in checkpoints(version)),
    ]
    curve = []
    for step, adapter in points:
        name = f"step{step:04d}" + ("" if adapter is None else f"-{weights_sha(adapter)[:8]}")
        per_env = {env: validity(env, adapter, name, out, log) for env in envs}
        curve.append({"step": step, **pooled_validity(per_env)})
    return curve


def pooled_validity(per_env: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Valid proposals pooled over the envs' `validity()` summaries, with the Wilson 95%
    interval, and each env's counts."""
    keys = ("valid", "proposals", "rejected", "generated_tokens", "generate_seconds")
    valid = sum(s["valid"] for s in per_env.values())
    proposals = sum(s["proposals"] for s in per_env.values())
    low, high = wilson_interval(valid, proposals)
    return {
        "valid": valid,
        "proposals": proposals,
        "valid_fraction": valid / proposals if proposals else None,
        "ci": [low, high],
        "per_env": {env: {k: s[k] for k in keys} for env, s in per_env.items()},
    }


def training_log(version: Path) -> list[dict[str, Any]]:
    """The Trainer's per-step log (loss, learning rate, ...) of the run behind `version`."""
    steps = checkpoints(version)
    if not steps:
        return []
    state = json.loads((steps[-1][1] / "trainer_state.json").read_text())
    return [row for row in state["log_history"] if "loss" in row]


def plot_sft(curve: list[dict[str, Any]], version: Path, path: Path) -> None:
    """Two panels: the held-out valid fraction over SFT steps (pooled with its 95% interval,
    and per env), and the training loss per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    steps = [point["step"] for point in curve]
    pooled = [point["valid_fraction"] for point in curve]
    # clamped: at 0 valid the Wilson bound is 0 up to rounding (-1e-17 fails errorbar)
    low = [max(0.0, f - point["ci"][0]) for f, point in zip(pooled, curve, strict=True)]
    high = [max(0.0, point["ci"][1] - f) for f, point in zip(pooled, curve, strict=True)]
    left.errorbar(steps, pooled, yerr=[low, high], marker="o", capsize=3, label="all envs")
    for env in curve[0]["per_env"]:
        fractions = [p["per_env"][env]["valid"] / p["per_env"][env]["proposals"] for p in curve]
        left.plot(steps, fractions, marker=".", linestyle="--", alpha=0.7, label=env)
    left.axhline(0.8, color="grey", linewidth=0.8, linestyle=":", label="goal 0.8")
    left.set(xlabel="SFT step", ylabel="held-out valid fraction", ylim=(0, 1.05))
    left.set_title("Held-out proposals that would run (95% interval)")
    left.legend(fontsize=8)
    log = training_log(version)
    offset = parent_steps(version)  # a run continued from an adapter counts from its steps
    right.plot([offset + row["step"] for row in log], [row["loss"] for row in log], linewidth=0.8)
    right.set(xlabel="SFT step", ylabel="training loss (completion tokens)")
    right.set_title("SFT loss")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def grpo_version(out: Path, sft: Path) -> Path | None:
    """The published GRPO engineer trained from the SFT version `sft` for the optimizer steps
    asked now (`grpo_args`), if any."""
    from harness_r1.trainer.versions import list_versions, read_metadata

    steps = int(option_value(grpo_args(), "--max-steps"))
    for version in list_versions(out / "engineer"):
        meta = read_metadata(version)
        if (
            meta.get("kind") == "grpo"
            and meta.get("parent_path") == str(sft)
            and meta.get("settings", {}).get("max_steps") == steps
        ):
            return version
    return None


COMMITTED_GRPO = COMMITTED / "grpo-engineer"
#: a paused GRPO run's checkpoint (`carry_checkpoint`), continued by the next session
CARRIED_GRPO = COMMITTED / "grpo-checkpoint"


def stage_grpo(envs: list[str], out: Path, log: Path, minutes: float | None) -> Path | None:
    """Stage 6: online GRPO from the SFT engineer on the cold start's packets of every env
    (training split, against the incumbents), K samples per packet, reward = canary delta over
    the incumbent (graded when invalid), `grpo_args`' optimizer steps. Resumable on this host
    (`train grpo online`'s run key) and across sessions: with `minutes` the run pauses before
    overrunning them and its checkpoint is committed (CARRIED_GRPO, ~22 MB: adapter, optimizer,
    scheduler, RNG), the next session's run continues from it (same SFT engineer and
    GRPO_ARGS). The finished engineer is committed (COMMITTED_GRPO). None: paused."""
    from harness_r1.trainer.runs import carry_checkpoint

    sft = sft_version(out)
    assert sft is not None, "stage 4 (SFT) first"
    version = grpo_engineer(out)
    if version is not None:
        if version != COMMITTED_GRPO:  # published here by an earlier run of this stage
            commit_grpo(version, sft, envs)
        return version
    carried = carried_grpo(sft, envs)
    packets = grpo_packets(envs, out)
    if carried is not None:
        note_packet_drift(carried, packets)
    command = [HR, "train", "grpo", "online", str(packets), "--out", str(out / "engineer"),
               "--adapter", str(sft), *grpo_args()]  # fmt: skip
    if minutes is not None:
        command += ["--stop-after-minutes", str(minutes)]
    if carried is not None:
        command += ["--resume-from", str(carried)]
    if not run(command, log, paused_ok=True):
        paused = json.loads((out / "engineer" / PAUSED_FILE).read_text())
        checkpoint = Path(paused["checkpoint"])
        record_grpo_curve(checkpoint / "trainer_state.json", out)
        lineage = {"sft_weights": weights_sha(sft), "grpo_args": grpo_args(), "envs": envs,
                   "step": paused["step"], "packet_ids": packet_ids(packets)}  # fmt: skip

        def note_lineage(staging: Path) -> None:
            (staging / "lineage.json").write_text(json.dumps(lineage, indent=2) + "\n")

        if TARGET_POLICY:  # not carried: the same command continues it from DIR on this host
            print(f"GRPO paused at step {paused['step']}: {checkpoint}")
            return None
        carry_checkpoint(checkpoint, CARRIED_GRPO, note_lineage)
        print(f"GRPO paused at step {paused['step']}: {CARRIED_GRPO} (commit it; the next run "
              "continues)")  # fmt: skip
        return None
    version = grpo_version(out, sft)
    assert version is not None, "train grpo online published no version"
    record_grpo_curve(checkpoints(version)[-1][1] / "trainer_state.json", out)
    commit_grpo(version, sft, envs)
    return version


#: what the GRPO curve keeps of each logged step (TRL's names; `canary/valid_fraction` is
#: CanaryReward's, logged on the steps that sampled a group, as are `canary/reward_<env>`, the
#: group's mean reward under the env it drew, since session 17)
GRPO_CURVE_KEYS = ("loss", "reward", "reward_std", "canary/valid_fraction", "grad_norm")
GRPO_CURVE_PREFIXES = ("canary/reward_",)


def grpo_packets(envs: list[str], out: Path) -> Path:
    """GRPO's packets, in DIR: the cold start's packets of `envs` (stage 3 first: a session
    regenerates the training runs they come from; packets hold task text, which stays in
    ../shared, never in the repository). Train-only, asserted: no held-out task reaches a
    GRPO group."""
    folders = [out / f"{env}-engineer-coldstart" for env in envs]
    missing = [str(f) for f in folders if not (f / "packets.jsonl").exists()]
    assert not missing, f"no packets for GRPO: run --stages coldstart first ({missing})"
    rows = [row for folder in folders for row in trajectories(folder / "packets.jsonl")]
    for env in envs:
        assert_train_only(env, [row for row in rows if row["env"] == env])
    assert {row["env"] for row in rows} <= set(envs), "GRPO packets of another env"
    packets = out / "engineer-packets.jsonl"
    packets.write_text("".join((f / "packets.jsonl").read_text() for f in folders))
    return packets


def packet_ids(packets: Path) -> list[str]:
    return [row["packet_id"] for row in trajectories(packets)]


def note_packet_drift(carried: Path, packets: Path) -> None:
    """Say so when a carried GRPO run continues on other packets than it paused on: the
    packets are rebuilt each session from regenerated training runs (task text is not kept),
    and a target that decodes differently on another CPU (bf16 or fp32) can fail other tasks.
    The run continues (its lineage is the engineer's, not the packets'); the curve's reader
    should know."""
    before = json.loads((carried / "lineage.json").read_text()).get("packet_ids")
    now = packet_ids(packets)
    if before is not None and before != now:
        kept = len(set(before) & set(now))
        print(f"GRPO continues on other packets than it paused on: {kept} of {len(now)} the "
              f"same (paused on {len(before)})")  # fmt: skip


def record_grpo_curve(state_file: Path, out: Path) -> list[dict[str, Any]]:
    """The GRPO run's per-step log so far (its trainer state: a resumed run's includes the
    steps before the pause) into DIR and the repository (numbers only), and its plot."""
    history = json.loads(state_file.read_text())["log_history"]

    def kept(key: str) -> bool:
        return key in GRPO_CURVE_KEYS or key.startswith(GRPO_CURVE_PREFIXES)

    curve = [
        {"step": row["step"], **{k: v for k, v in row.items() if kept(k)}}
        for row in history
        if "step" in row and any(kept(k) for k in row)
    ]
    for folder in map(writable, published(out)):
        (folder / "results-grpo-curve.json").write_text(json.dumps(curve, indent=2) + "\n")
        plot_grpo(curve, folder / "grpo-curve.png")
    return curve


def plot_grpo(curve: list[dict[str, Any]], path: Path) -> None:
    """Three panels over GRPO steps: mean reward (with its group spread), the valid fraction
    of the sampled groups, the loss."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    panels = [("reward", "mean reward (canary delta; graded when invalid)"),
              ("canary/valid_fraction", "valid fraction of the sampled group"),
              ("loss", "GRPO loss (dapo)")]  # fmt: skip
    for axis, (key, title) in zip(axes, panels, strict=True):
        points = [(row["step"], row[key]) for row in curve if key in row]
        if points:
            axis.plot(*zip(*points, strict=True), marker=".", linewidth=0.8)
        axis.set(xlabel="GRPO step", title=title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def weights_sha(version: Path) -> str:
    from harness_r1.trainer.model_io import file_sha256

    return file_sha256(version / "adapter_model.safetensors")


def carried_grpo(sft: Path, envs: list[str]) -> Path | None:
    """The committed paused checkpoint when it continues a run from `sft` with `grpo_args` on
    the packets of the same envs."""
    lineage = CARRIED_GRPO / "lineage.json"
    if TARGET_POLICY or not lineage.exists():  # the carried checkpoint ran against SmolLM2
        return None
    meta = json.loads(lineage.read_text())
    same = (weights_sha(sft), grpo_args(), sorted(envs))
    if (meta["sft_weights"], meta["grpo_args"], sorted(meta.get("envs") or [])) != same:
        print(f"{CARRIED_GRPO}: from another SFT engineer, GRPO_ARGS or envs: GRPO starts afresh")
        return None
    return CARRIED_GRPO


def grpo_engineer(out: Path) -> Path | None:
    """The GRPO engineer from the current SFT engineer: published here, else committed."""
    sft = sft_version(out)
    if sft is None:
        return None
    version = grpo_version(out, sft)
    if version is not None:
        return version
    lineage = COMMITTED_GRPO / "lineage.json"
    if not lineage.exists():
        return None
    meta = json.loads(lineage.read_text())
    if meta["sft_weights"] == weights_sha(sft) and meta["grpo_args"] == grpo_args():
        return COMMITTED_GRPO
    return None


def lineage_envs(version: Path, committed: Path) -> list[str] | None:
    """The envs a trained engineer `version` learned from (a GRPO engineer's packets, an RFT
    engineer's rows), from the lineage of the `committed` engineer when `version` has its
    weights (None: not known here)."""
    lineage = committed / "lineage.json"
    if not lineage.exists() or weights_sha(version) != weights_sha(committed):
        return None
    envs: list[str] = json.loads(lineage.read_text())["envs"]
    return envs


def commit_grpo(version: Path, sft: Path, envs: list[str]) -> None:
    """Keep the finished GRPO engineer in the repository with the SFT weights it started
    from; the carried checkpoint has served."""
    import shutil

    if TARGET_POLICY:
        return  # another target's engineer stays in DIR (`published`)

    def note_lineage(copy: Path) -> None:
        lineage = {"sft_weights": weights_sha(sft), "grpo_args": grpo_args(), "envs": envs}
        (copy / "lineage.json").write_text(json.dumps(lineage, indent=2) + "\n")

    if version != COMMITTED_GRPO:
        shutil.rmtree(COMMITTED_GRPO, ignore_errors=True)
        copy_whole(version, COMMITTED_GRPO, note_lineage)
    shutil.rmtree(CARRIED_GRPO, ignore_errors=True)


#: rejection-sampling fine-tuning (RFT; DeepSeek-R1's step after its first RL stage): the
#: SFT+GRPO engineer continued by SFT on the cold start's rows whose canary beat the incumbent,
#: that is realised outcomes of the template teacher's samples on training packets. Why: GRPO's
#: groups of K=4 almost never sample ALFWorld's winning call (the reach stage: once in 80 at
#: temperature 1.0), so its reward never pointed there, while the cold start holds that call
#: improving 3 times. RFT_EPOCHS passes over `rft_selection`, the SFT engineer's settings
#: (SFT_ARGS) otherwise
RFT_EPOCHS = 3
COMMITTED_RFT = COMMITTED / "rft-engineer"


def improving(row: dict[str, Any]) -> bool:
    """Whether a cold-start row's canary beat the incumbent (success rate, its packet's tasks)."""
    delta: float = row["metadata"]["delta_success"]
    return delta > 0


def rft_selection(rows_by_env: dict[str, list[dict[str, Any]]]) -> list[tuple[str, Any]]:
    """(env, row) for every improving row, env order then file order, each env's rows repeated
    round(most / its count) times, where `most` is the largest env's count: WebShop's 13
    improving rows would otherwise drown ALFWorld's 3. An env without one adds nothing."""
    kept = {env: [row for row in rows if improving(row)] for env, rows in rows_by_env.items()}
    most = max((len(rows) for rows in kept.values()), default=0)
    return [
        (env, row)
        for env, rows in kept.items()
        if rows
        for _ in range(round(most / len(rows)))
        for row in rows
    ]


def rft_dataset(envs: list[str], out: Path) -> Path:
    """The RFT rows (`rft_selection` of the envs' cold starts in sorted env order, prompts and
    completions as the SFT dataset has them) in DIR/engineer-rft.jsonl."""
    selected = rft_selection({env: coldstart_rows(env, out) for env in sorted(envs)})
    path = out / "engineer-rft.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for _, row in selected), encoding="utf-8")
    return path


@functools.cache
def committed_rft_digest(envs: tuple[str, ...]) -> str:
    """`rows_digest` of the RFT dataset a restore of the committed rows of `envs` would give,
    computed without the restore (as `committed_rows_digest`)."""
    return taught_digest(rft_selection({env: committed_coldstart(env) for env in sorted(envs)}))


def rft_steps(rows: int) -> int:
    """RFT's optimizer steps over `rows` rows: RFT_EPOCHS epochs (`epoch_steps`)."""
    return epoch_steps(rows, RFT_EPOCHS)


def rft_parent(out: Path) -> Path | None:
    """The engineer RFT continues: the SFT+GRPO engineer (None before it is trained)."""
    return grpo_engineer(out)


def rft_engineer(out: Path, envs: list[str] | None = None) -> Path | None:
    """The RFT engineer of the current parent (`rft_parent`): published here from this run's
    RFT dataset with rft_steps and SFT_ARGS' learning rate, else the committed one if it
    continued the same weights for RFT_EPOCHS on the rows the committed cold start of `envs`
    gives (its own envs when None: the table takes it whatever it was taught; the rft stage
    only for the rows it would teach, so an env without an improving row changes nothing);
    None otherwise."""
    from harness_r1.trainer.model_io import file_sha256
    from harness_r1.trainer.versions import list_versions, read_metadata

    parent = rft_parent(out)
    if parent is None:
        return None
    parent_sha = weights_sha(parent)
    dataset = out / "engineer-rft.jsonl"
    if dataset.exists():
        sha, steps = file_sha256(dataset), rft_steps(len(trajectories(dataset)))
        rate = float(option_value(SFT_ARGS, "--learning-rate"))
        for version in reversed(list_versions(out / "rft")):  # the latest first
            meta = read_metadata(version)
            continued = Path(meta.get("parent_path") or "")
            if (
                meta.get("dataset", {}).get("sha256") == sha
                and meta.get("steps") == steps
                and meta.get("settings", {}).get("learning_rate") == rate
                and (continued / "adapter_model.safetensors").exists()
                and weights_sha(continued) == parent_sha
            ):
                return version
    lineage = COMMITTED_RFT / "lineage.json"
    if not lineage.exists():
        return None
    meta = json.loads(lineage.read_text())
    same = (
        meta["parent_weights"] == parent_sha
        and meta["epochs"] == RFT_EPOCHS
        and meta["rows_digest"]
        == committed_rft_digest(tuple(meta["envs"] if envs is None else envs))
    )
    return COMMITTED_RFT if same else None


def stage_rft(envs: list[str], out: Path, log: Path) -> Path | None:
    """RFT: the envs' cold starts (restored from the committed rows, or run), their improving
    rows (`rft_selection`), and `train sft` from a copy of the SFT+GRPO engineer for rft_steps
    over them (resumable by its run key); the result is committed with its lineage (not under
    `--target-policy`). None, said why, before GRPO has finished, without an improving row, or
    against another target (its cold start is packets only: no rows to filter)."""
    if TARGET_POLICY:
        print("RFT: against another target the cold start has no rows (`packets_only`)")
        return None
    parent = rft_parent(out)
    if parent is None:
        print("RFT: no SFT+GRPO engineer yet (stage grpo) to continue")
        return None
    for env in envs:
        stage_coldstart(env, out, log)
    dataset = rft_dataset(envs, out)
    rows = len(trajectories(dataset))
    if not rows:
        print(f"RFT: no cold-start row of {envs} beat the incumbent: nothing to teach")
        return None
    version = rft_engineer(out, envs)
    if version is None:
        copy = out / "rft-parents" / weights_sha(parent)[:12]
        if not copy.exists():
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy_whole(parent, copy)
        run([HR, "train", "sft", str(dataset), "--out", str(out / "rft"), "--adapter", str(copy),
             "--max-steps", str(rft_steps(rows)), *SFT_ARGS], log)  # fmt: skip
        version = rft_engineer(out, envs)
    assert version is not None, "train sft published no version for the RFT rows"
    commit_rft(version, parent, dataset, envs)
    return version


def commit_rft(version: Path, parent: Path, dataset: Path, envs: list[str]) -> None:
    """Keep the RFT engineer in the repository with what it continued and what it was taught
    (`rft_engineer` takes it only for the same)."""
    import shutil

    if version == COMMITTED_RFT or TARGET_POLICY:
        return

    def note_lineage(copy: Path) -> None:
        lineage = {"parent_weights": weights_sha(parent), "rows_digest": rows_digest(dataset),
                   "epochs": RFT_EPOCHS, "envs": sorted(envs)}  # fmt: skip
        (copy / "lineage.json").write_text(json.dumps(lineage, indent=2) + "\n")

    shutil.rmtree(COMMITTED_RFT, ignore_errors=True)
    copy_whole(version, COMMITTED_RFT, note_lineage)


def engineer_args(name: str, out: Path) -> list[str] | None:
    """How `engineer evaluate` runs each engineer of the table (None: not trained yet);
    `NAME-without-HOOK`: that engineer, barred from writing HOOK (the ablation)."""
    if "-without-" in name:
        base, hook = name.split("-without-")
        args = engineer_args(base, out)
        return None if args is None else [*args, "--without-hook", hook]
    if name == "untrained":
        return []
    if name == "teacher":
        return ["--teacher", "1"]  # as it wrote the cold start: one template per patch
    versions = {"sft": sft_version, "grpo": grpo_engineer, "rft": rft_engineer}
    version = versions[name](out)
    return None if version is None else ["--adapter", str(version)]


def engineer_files(env: str, name: str, out: Path, args: list[str]) -> dict[str, Path]:
    """Where an engineer's table row keeps its files: keyed by the incumbent (a report from
    before an incumbent change is not reused), for a trained engineer by its weights (a
    retrained engineer runs again) and for a model engineer by its prompt (the untrained one
    has no weights of its own: session 17's template menu changed what it reads); the sampling
    in the report's name."""
    temperature = option_value(TABLE_SAMPLING, "--temperature")
    stem = f"{env}-{name}-{engineer_tag(env, out, args)}"
    return {
        "report": out / "engineers" / f"{stem}-t{temperature}.json",
        "best": out / "engineers" / f"{stem}-best.json",
        "after": out / "engineers" / f"{stem}-heldout-after-best.jsonl",
    }


def engineer_tag(env: str, out: Path, args: list[str]) -> str:
    """What an engineer's result on `env` depends on, in a file name: the incumbent, the
    adapter's weights and the prompt it reads (see `engineer_files`)."""
    weights = adapter_weights(args)
    prompt = engineer_prompt_sha(env, args)
    return (
        incumbent_digest(env, out)[:12]
        + (f"-{weights}" if weights else "")
        + (f"-p{prompt[:8]}" if prompt else "")
    )


def engineer_prompt_sha(env: str, args: list[str]) -> str | None:
    """SHA-256 of the lean system prompt an engineer of `args` reads on `env` (the hooks it may
    write included); None for the template teacher, which reads no prompt."""
    import hashlib

    from harness_r1.trainer.prompt import PromptConfig, hooks_without, system_prompt

    if "--teacher" in args:
        return None
    removed = [args[i + 1] for i, arg in enumerate(args) if arg == "--without-hook"]
    text = system_prompt(env, config=PromptConfig(lean=True, hooks=hooks_without(removed)))
    return hashlib.sha256(text.encode()).hexdigest()


def adapter_weights(args: list[str]) -> str | None:
    """The first 12 hex digits of the weights of the adapter `args` run (None: no adapter)."""
    return weights_sha(Path(option_value(args, "--adapter")))[:12] if "--adapter" in args else None


def engineer_row(env: str, name: str, out: Path, log: Path) -> dict[str, Any] | None:
    """One engineer on the env's held-out packets against the incumbent: K proposals per packet,
    canaried, gated (guard: the other held-out tasks), and the held-out success of the deployed
    harness after its best promoted patch (the incumbent alone when it promoted nothing)."""
    args = engineer_args(name, out)
    if args is None:
        return None
    on = incumbent_on(env, out)
    files = engineer_files(env, name, out, args)
    path = files["report"]
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        run([HR, "engineer", "evaluate", str(heldout_runs(env, out, log)), "--env", env,
             "--split", SPLITS[env][1], *args, "--lean-prompt", *on, "-k", str(K),
             "--batch-size", str(BATCH), *TABLE_SAMPLING, *GATE,
             "--max-steps", TARGET[1], "--history-turns", TARGET[3], *TARGET_POLICY,
             "--baseline-cache", str(out / "baselines"), "--out", str(path)], log)  # fmt: skip
    report = json.loads(path.read_text())
    summary = report["summary"]
    promoted = [
        sample for packet in report["packets"] for sample in packet["samples"] if "patch" in sample
    ]
    row: dict[str, Any] = {
        "engineer": name,
        "incumbent_sha256": incumbent_digest(env, out),
        "weights_sha256_12": adapter_weights(args),
        "prompt_sha256": engineer_prompt_sha(env, args),
        "proposals": summary["proposals"],
        "valid": summary["valid"],
        "valid_ci": list(wilson_interval(summary["valid"], summary["proposals"])),
        "evaluated": summary["evaluated"],
        "deltas": [d for packet in report["packets"] for d in packet["deltas"]],
        "mean_delta": summary["mean_delta"],
        "promoted": summary["promoted"],
        "promoted_ci": list(wilson_interval(summary["promoted"], summary["proposals"])),
        "rejected": summary["rejected"],
        "generate_seconds": summary["generate_seconds"],
        "canary_seconds": summary["canary_seconds"],
        "target_dtype": report.get("target_dtype") or target_dtype(),
    }
    row["mean_delta_ci"] = mean_interval(row["deltas"])
    # which envs' packets (GRPO) or improving rows (RFT) it learned from: another env's row is
    # transfer
    committed = {"grpo": COMMITTED_GRPO, "rft": COMMITTED_RFT}.get(name)
    if committed is not None:
        row[f"{name}_envs"] = lineage_envs(Path(option_value(args, "--adapter")), committed)
    after = heldout_runs(env, out, log)
    patch = None
    if promoted:
        patch = json.dumps(max(promoted, key=lambda sample: sample["delta"])["patch"])  # first
    if not files["best"].exists() or files["best"].read_text(encoding="utf-8") != patch:
        # another report's best patch: neither it nor its held-out run is this row's (and
        # `promoted_best` deploys it)
        files["best"].unlink(missing_ok=True)
        files["after"].unlink(missing_ok=True)
    if patch is not None:
        files["best"].write_text(patch, encoding="utf-8")
        after = files["after"]
        heldout_target_runs(env, [*on, "--on", str(files["best"])], after, log)
    row["heldout_after_best"] = rate(after)
    row["heldout_after_best"]["patched"] = bool(promoted)
    return row


def target_dtype() -> str:
    """The number format the embedded target computes in on this host ("auto": bf16 only where
    the CPU has it natively), for a report that does not say its own. A row's canary deltas
    pair two arms of one format; rows measured on hosts of different formats sit in one table,
    so each says its own (rows from before session 18 have no field: they ran on hosts with
    native bf16)."""
    from harness_r1.harness.policies.cpu import choose_dtype

    return choose_dtype("auto").dtype


def mean_interval(values: list[float], samples: int = 2000) -> list[float] | None:
    """A 95% percentile-bootstrap interval of the mean (seeded: the same values, the same
    interval); None without values."""
    import random

    if not values:
        return None
    rng = random.Random(0)
    means = sorted(sum(rng.choices(values, k=len(values))) / len(values) for _ in range(samples))
    return [means[int(0.025 * samples)], means[int(0.975 * samples) - 1]]


def stage_engineers(
    envs: list[str], out: Path, log: Path, names: tuple[str, ...] = ENGINEERS
) -> dict[str, list[dict[str, Any]]]:
    """Stage 5: the comparison table's engineer rows, per env (those trained so far)."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for env in envs:
        found = [engineer_row(env, name, out, log) for name in names]
        rows[env] = [row for row in found if row is not None]
    return rows


def plot_engineers(rows: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """The table as bars per env and engineer: valid fraction, mean canary delta and promoted
    fraction, each with its 95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(rows)
    names = [n for n in ENGINEERS if any(r["engineer"] == n for env in envs for r in rows[env])]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    width = 0.8 / max(1, len(names))
    panels = [
        ("valid fraction", "valid", "valid_ci", True),
        ("mean canary delta of the valid proposals", "mean_delta", "mean_delta_ci", False),
        ("promoted by the gate", "promoted", "promoted_ci", True),
    ]
    for axis, (title, key, ci_key, fraction) in zip(axes, panels, strict=True):
        for offset, name in enumerate(names):
            xs, ys, lows, highs = [], [], [], []
            for x, env in enumerate(envs):
                row = next((r for r in rows[env] if r["engineer"] == name), None)
                if row is None or row[key] is None or row[ci_key] is None:
                    continue
                value = row[key] / row["proposals"] if fraction else row[key]
                xs.append(x + offset * width)
                ys.append(value)
                lows.append(max(0.0, value - row[ci_key][0]))
                highs.append(max(0.0, row[ci_key][1] - value))
            axis.bar(xs, ys, width, yerr=[lows, highs], capsize=2, label=name)
        axis.set_xticks([x + width * (len(names) - 1) / 2 for x in range(len(envs))], envs)
        axis.set_title(title, fontsize=10)
        axis.axhline(0, color="grey", linewidth=0.6)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def stage_teacher(env: str, out: Path, log: Path) -> dict[str, Any] | None:
    """The template teacher as an engineer on held-out packets (failures of the held-out runs
    under the incumbent), K proposals each, canaried against the incumbent: valid fraction,
    mean delta, share improving; then its best patch, composed onto the incumbent, on the
    held-out tasks (transductive, as the canary: the same tasks it was chosen on). Its packets
    are held-out ones and stay in their own folder: no training stage reads them."""
    _, heldout = SPLITS[env]
    incumbent_file = out / f"{env}-incumbent.txt"
    runs = out / f"{env}-heldout-incumbent.jsonl"
    if not incumbent_file.exists() or not runs.exists():
        return None
    teacher = out / f"{env}-eval-teacher"
    on = ["--on", str(incumbent_file)]
    if not (teacher / "stats.json").exists():
        run([HR, "train", "coldstart", str(runs), "--env", env, "--split", heldout,
             "--out", str(teacher), "-k", str(K), "--batch-size", str(BATCH), *on,
             "--baseline-cache", str(out / "baselines"), *TARGET, *TARGET_POLICY],
            log)  # fmt: skip
    rows = trajectories(teacher / "dataset.jsonl") + trajectories(teacher / "rejected.jsonl")
    deltas = [r["metadata"].get("delta_success") for r in rows]
    evaluated = [d for d in deltas if d is not None]
    best = best_kept(teacher / "dataset.jsonl")
    summary: dict[str, Any] = {
        "proposals": len(rows),
        "valid": len(evaluated),
        "valid_fraction": len(evaluated) / len(rows) if rows else 0.0,
        "mean_delta": sum(evaluated) / len(evaluated) if evaluated else None,
        "improving_fraction": sum(d > 0 for d in evaluated) / len(rows) if rows else 0.0,
        "best_delta": best["metadata"]["delta_success"] if best else None,
    }
    if best is not None and best["metadata"]["delta_success"] > 0:
        link = out / f"{env}-teacher-best.txt"
        link.write_text(best["completion"][-1]["content"], encoding="utf-8")
        path = out / f"{env}-heldout-incumbent+teacher.jsonl"
        heldout_target_runs(env, [*on, "--on", str(link)], path, log)
        summary["heldout_after_best"] = rate(path)
    return summary


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| env | condition | held-out success | 95% interval |",
        "| --- | --- | --- | --- |",
    ]
    for result in results:
        rows = dict(result["heldout"])
        after = (result.get("teacher") or {}).get("heldout_after_best")
        if after is not None:
            rows["incumbent+teacher's best"] = after
        for name, row in rows.items():
            low, high = row["ci"]
            lines.append(
                f"| {result['env']} | {name} | {row['successes']}/{row['n']} "
                f"({row['rate']:.0%}) | [{low:.0%}, {high:.0%}] |"
            )
    return "\n".join(lines)


def engineers_table(rows: dict[str, list[dict[str, Any]]]) -> str:
    lines = [
        "| env | engineer | valid | mean delta [95%] | promoted | held-out after best |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for env, env_rows in rows.items():
        for row in env_rows:
            low, high = row["valid_ci"]
            valid = f"{row['valid']}/{row['proposals']} [{low:.0%}, {high:.0%}]"
            delta = "n/a"
            if row["mean_delta"] is not None:
                low, high = row["mean_delta_ci"]
                delta = f"{row['mean_delta']:+.3f} [{low:+.3f}, {high:+.3f}]"
            promoted = f"{row['promoted']}/{row['proposals']}"
            after = row["heldout_after_best"]
            held = f"{after['successes']}/{after['n']} [{after['ci'][0]:.0%}, {after['ci'][1]:.0%}]"
            if not after["patched"]:
                held += " (nothing promoted: the incumbent)"
            fp32 = row.get("target_dtype") == "float32"
            name = row["engineer"] + (" (fp32 target)" if fp32 else "")
            lines.append(f"| {env} | {name} | {valid} | {delta} | {promoted} | {held} |")
    return "\n".join(lines)


def run_baselines(envs: list[str], out: Path, log: Path, teacher: bool) -> None:
    results = []
    for env in envs:
        result = stage_one(env, out, log)
        if teacher:
            result["teacher"] = stage_teacher(env, out, log)
        results.append(result)
    for result in results:  # one file per env: envs may run in separate invocations
        path = out / f"results-{result['env']}.json"
        path.write_text(json.dumps(result, indent=2) + "\n")
    print(table(results))


def run_coldstart(envs: list[str], out: Path, log: Path) -> None:
    """The cold start of `envs`; the SFT dataset merges them only when they are all of
    DEFAULT_ENVS: the engineer is taught on the three envs together, and a run for some envs
    (the packets GRPO on one env reads) must not leave a one-env dataset that `sft_version`
    would take for a new cold start (the committed engineer serves then)."""
    summary: dict[str, Any] = {env: stage_coldstart(env, out, log) for env in envs}
    if sorted(envs) != sorted(DEFAULT_ENVS) or TARGET_POLICY:
        print(json.dumps(summary, indent=2))
        print(f"cold start of {envs} against {TARGET_POLICY or 'SmolLM2'}: packets only, the "
              "SFT dataset (SmolLM2's, all three envs) is not merged")  # fmt: skip
        return
    summary["total_kept"] = merge_coldstart(list(DEFAULT_ENVS), out)  # the committed row order
    (out / "results-coldstart.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    assert summary["total_kept"] >= MIN_COLDSTART_ROWS, "too few rows"


def run_sft(envs: list[str], out: Path, log: Path) -> None:
    if TARGET_POLICY:  # "a new engineer version from the same cold start" (issue 20)
        print(f"SFT engineer against another target: the committed one, {sft_version(out)}")
        return
    version = sft_version(out)
    planned = sft_steps_planned(out / "engineer-coldstart.jsonl")
    if version == COMMITTED_SFT and sft_steps(version) >= planned:  # trained in a session before
        print(f"SFT engineer: {version} (committed; its curve: {COMMITTED}/results-sft-curve.json)")
        return
    curve = stage_sft_curve(envs, out, log)
    (out / "results-sft-curve.json").write_text(json.dumps(curve, indent=2) + "\n")
    version = sft_version(out)
    assert version is not None
    commit_sft(version, out / "engineer-coldstart.jsonl")
    commit_curve(curve)
    for folder in published(out):
        plot_sft(curve, version, folder / "sft-curve.png")
    for point in curve:
        low, high = point["ci"]
        print(f"step {point['step']}: {point['valid']}/{point['proposals']} valid "
              f"[{low:.0%}, {high:.0%}]")  # fmt: skip


def commit_curve(curve: list[dict[str, Any]]) -> None:
    """The curve's points into the repository (counts only), after the points of earlier
    sessions up to where this curve starts (its run continued from there: later points of
    theirs belong to another run)."""
    if TARGET_POLICY:
        return  # another target's curve stays in DIR (`published`)
    path = COMMITTED / "results-sft-curve.json"
    earlier = json.loads(path.read_text()) if path.exists() else []
    points = {p["step"]: p for p in earlier if p["step"] < curve[0]["step"]}
    points.update({p["step"]: p for p in curve})
    path.write_text(json.dumps([points[k] for k in sorted(points)], indent=2) + "\n")


def keep_results(name: str, results: Any, out: Path) -> None:
    """A stage's results (counts and rates, no task data) into DIR and into the repository
    (`results_home`), so what BENCHMARKS.md reports is the file the run wrote."""
    for folder in map(writable, published(out)):
        (folder / name).write_text(json.dumps(results, indent=2) + "\n")


def committed_results(name: str) -> dict[str, Any]:
    """A stage's committed results (empty before its first run): a run over some envs or
    engineers merges into them rather than dropping the others' rows; those of the target the
    run is against (`results_home`)."""
    path = results_home() / name
    return json.loads(path.read_text()) if path.exists() else {}


def merged_engineer_rows(
    earlier: dict[str, list[dict[str, Any]]], rows: dict[str, list[dict[str, Any]]]
) -> dict[str, list[dict[str, Any]]]:
    """The committed table with this run's rows in: per env, an earlier row is kept only for an
    engineer not rerun, only if it ran against the same incumbent as this run's rows, and, for
    a model engineer (not the teacher), only if it read the current prompt (a row from before
    `prompt_sha256` was recorded has none: it goes)."""
    merged = {env: list(found) for env, found in earlier.items()}
    for env, found in rows.items():
        if not found:  # no engineer of this run is trained yet: the committed rows stand
            continue
        rerun = {row["engineer"] for row in found}
        incumbents = {row["incumbent_sha256"] for row in found}
        prompt = engineer_prompt_sha(env, [])  # what the table's model engineers read
        kept = [
            row
            for row in earlier.get(env, [])
            if row["engineer"] not in rerun
            and row.get("incumbent_sha256") in incumbents
            and (row["engineer"] == "teacher" or row.get("prompt_sha256") == prompt)
        ]
        order = {name: i for i, name in enumerate(ENGINEERS)}
        merged[env] = sorted([*kept, *found], key=lambda row: order.get(row["engineer"], 99))
    return merged


def run_engineers(envs: list[str], out: Path, log: Path, names: tuple[str, ...]) -> None:
    rows = merged_engineer_rows(
        committed_results("results-engineers.json"), stage_engineers(envs, out, log, names)
    )
    keep_results("results-engineers.json", rows, out)
    for folder in map(writable, published(out)):
        plot_engineers(rows, folder / "engineers.png")
    print(engineers_table(rows))


def final_engineer(out: Path) -> str | None:
    """The most trained engineer of the SFT -> GRPO line: the subject of the ablation, the
    transfer and the coevolution (the RFT engineer came after they were measured, and is not
    theirs)."""
    return next((n for n in ("grpo", "sft") if engineer_args(n, out) is not None), None)


def run_ablation(envs: list[str], out: Path, log: Path) -> None:
    """Stage 7: the most trained engineer with each of the four hooks removed from what it may
    write (at evaluation: the prompt leaves the hook out, a patch writing it is invalid), on
    the same held-out packets, canary and gate as its own row."""
    from harness_r1.contracts import HookName

    name = final_engineer(out)
    assert name is not None, "train an engineer first (stages sft, grpo)"
    names = (name, *(f"{name}-without-{hook}" for hook in HookName))
    rows = stage_engineers(envs, out, log, names)
    earlier = committed_results("results-ablation.json")
    keep_results("results-ablation.json", {**earlier, **rows}, out)
    print(engineers_table(rows))


def condition_slug(condition: str) -> str:
    """A harness condition as a file-name part: "incumbent+grpo's best" ->
    "incumbent-grpo-s-best"."""
    return re.sub(r"[^a-z0-9]+", "-", condition.lower()).strip("-")


#: the transfer target: Gemma 3 270M (pretrained, Q4_K_M GGUF; `pip install '.[gemma]'`)
TRANSFER_POLICY = ["--policy", "gemma3"]


def run_transfer(envs: list[str], out: Path, log: Path) -> None:
    """Stage 8: patches written against SmolLM2 applied to Gemma 3 270M as the target: its
    held-out success under the base harness, the incumbent, and the incumbent plus each
    engineer's best promoted patch (stage 5's, where one was promoted)."""
    results: dict[str, dict[str, Any]] = {}
    for env in envs:
        on = incumbent_on(env, out)
        folder = out / "transfer"
        folder.mkdir(parents=True, exist_ok=True)
        conditions: dict[str, list[str]] = {"base": [], "incumbent": on} if on else {"base": []}
        for name in ENGINEERS:  # the table's rows, not the ablation's
            args = engineer_args(name, out)
            best = None if args is None else engineer_files(env, name, out, args)["best"]
            if best is not None and best.exists():
                conditions[f"incumbent+{name}'s best"] = [*on, "--on", str(best)]
        results[env] = {}
        for condition, extra in conditions.items():
            path = folder / f"{env}-gemma3-{condition_slug(condition)}.jsonl"
            heldout_target_runs(env, [*TRANSFER_POLICY, *extra], path, log)
            results[env][condition] = rate(path)
    keep_results("results-transfer.json", {**committed_results("results-transfer.json"), **results},
                 out)  # fmt: skip
    for env, rows in results.items():
        for condition, row in rows.items():
            low, high = row["ci"]
            print(f"| {env} | gemma3, {condition} | {row['successes']}/{row['n']} "
                  f"[{low:.0%}, {high:.0%}] |")  # fmt: skip


#: what the tuned target learns of its successful training episodes under the deployed harness:
#: the executed actions. The incumbents force every step of every success here (WebShop 59 of 59
#: steps, DBBench 7 of 9 and 2 without a model call, session 12), so the target's own accepted
#: outputs (`--rows own`) are none: the tuned target can only absorb what the harness did.
#: One row a step: `train target`'s default of 4 rows (up to 2.75k tokens each, fp32) was
#: killed for memory at 24 GB on these 2 cores (session 12); one epoch (~10 s a row here)
COEVOLUTION_TARGET_ARGS = ["--rows", "executed", "--batch-size", "1", "--epochs", "1"]


def promoted_best(env: str, out: Path) -> dict[str, Path] | None:
    """The final engineer's best promoted patch on `env` and its held-out run (its
    engineers-stage row's files: "best", "after"; None where it promoted nothing or has not
    run here)."""
    name = final_engineer(out)
    args = None if name is None else engineer_args(name, out)
    if name is None or args is None:
        return None
    files = engineer_files(env, name, out, args)
    if not files["report"].exists():  # not "promoted nothing": not measured here
        raise SystemExit(
            f"no {name} row for {env} in {out}: run --stages engineers --envs {env} "
            f"--engineers {name} first (what it promotes is the deployed harness)"
        )
    return files if files["best"].exists() else None


def deployed_on(env: str, out: Path) -> list[str]:
    """`--on` for what the pool runs once the engineers' round is deployed: the incumbent plus
    the final engineer's best promoted patch where it promoted one, else the incumbent."""
    best = promoted_best(env, out)
    return [*incumbent_on(env, out), *(["--on", str(best["best"])] if best else [])]


def short_digest(*parts: bytes) -> str:
    import hashlib

    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:12]


def run_coevolution(envs: list[str], out: Path, log: Path) -> None:
    """Stage 9 (the paper's coevolution): the target fine-tuned on its own successful training
    episodes under the deployed harness (`deployed_on`: the incumbent plus the final
    engineer's best promoted patch, where the engineers stage promoted one; `train target`,
    COEVOLUTION_TARGET_ARGS: LoRA SFT on the executed actions, merged into a checkpoint), then
    the held-out success of the frozen and the tuned target under the base harness, the
    incumbent and the incumbent plus that patch: whether harness patching still adds on top
    of a tuned target (the paper's 59.2 -> 64.2). The patch is the one found against the
    frozen target; the engineer retrained against the tuned target is stages coldstart (packets
    only), grpo and engineers again with `--target-policy` the tuned checkpoint and a fresh
    --out (the module's docstring; `make bench` runs it on WebShop after this stage)."""
    assert not TARGET_POLICY, "coevolution tunes the embedded SmolLM2: no --target-policy"
    folder = out / "coevolution"
    folder.mkdir(parents=True, exist_ok=True)
    runs, generations, harnesses = [], [], []
    for env in envs:
        on = deployed_on(env, out)  # named by its patches' contents: another harness, another file
        tag = short_digest(*(Path(f).read_bytes() for f in on[1::2])) if on else "base"
        path = folder / f"{env}-train-{tag}.jsonl"
        recorded = folder / f"{env}-train-{tag}-generations.jsonl"
        if not path.exists() or not recorded.exists():
            path.unlink(missing_ok=True)
            target_runs(env, SPLITS[env][0], COLDSTART_TASKS[env], SEED,
                        [*on, "--record-generations", str(recorded)], path, log)  # fmt: skip
        runs.append(path)
        generations.append(recorded)
        harnesses.append(f"{env}-{tag}")
    target = folder / f"target-{short_digest(*(h.encode() for h in harnesses))}"

    def merged() -> list[Path]:  # finished merges only (a merge in progress is hidden)
        return sorted(target.glob("tuned-v[0-9][0-9][0-9][0-9]"))

    tuned = merged()
    if not tuned:
        run([HR, "train", "target", *map(str, runs), *COEVOLUTION_TARGET_ARGS,
             *(arg for g in generations for arg in ("--generations", str(g))),
             "--out", str(target)], log)  # fmt: skip
        tuned = merged()
    checkpoint = tuned[-1]
    (folder / "tuned-target.txt").write_text(f"{checkpoint}\n")  # the retrain's (run_all.sh)
    print(f"tuned target: {checkpoint}")
    results: dict[str, dict[str, Any]] = {}
    for env, path in zip(envs, runs, strict=True):
        results[env] = coevolution_rows(env, out, checkpoint, log)
        results[env]["trained_on"] = {**rate(path), "harness": harness_label(env, out)}
    earlier = committed_results("results-coevolution.json")
    keep_results("results-coevolution.json", {**earlier, **results}, out)
    print(json.dumps(results, indent=2))


def harness_label(env: str, out: Path) -> str:
    """The deployed harness of `deployed_on` in words: "incumbent+grpo's best", "incumbent",
    "base"."""
    under = "incumbent" if incumbent_on(env, out) else "base"
    return f"{under}+{final_engineer(out)}'s best" if promoted_best(env, out) else under


def coevolution_rows(env: str, out: Path, checkpoint: Path, log: Path) -> dict[str, Any]:
    """The frozen and the tuned target's held-out success under each harness: base, incumbent
    (where the env has one) and incumbent plus the best promoted patch (where there is one;
    the frozen target's run of it is the engineers stage's)."""
    on, best = incumbent_on(env, out), promoted_best(env, out)
    conditions = {"base": ([], out / f"{env}-heldout-base.jsonl")}
    if on:
        conditions["incumbent"] = (on, heldout_runs(env, out, log))
    if best is not None:  # the deployed harness (`deployed_on`)
        conditions[harness_label(env, out)] = ([*on, "--on", str(best["best"])], best["after"])
    rows: dict[str, dict[str, Any]] = {"frozen": {}, "tuned": {}}
    for condition, (extra, frozen) in conditions.items():
        rows["frozen"][condition] = rate(heldout_target_runs(env, extra, frozen, log))
        tuned_name = f"{checkpoint.parent.name}-{checkpoint.name}"
        path = out / "coevolution" / f"{env}-heldout-{tuned_name}-{condition_slug(condition)}.jsonl"
        tuned = heldout_target_runs(env, ["--policy", str(checkpoint), *extra], path, log)
        rows["tuned"][condition] = rate(tuned)
    return rows


#: the hand-written reference patch per env (`harness_r1/sandbox/reference_patches/`): never a
#: training target, only the headroom stage's yardstick
REFERENCE = {
    "webshop": "webshop_shopper",
    "dbbench": "dbbench_lookup",
    "alfworld": "alfworld_explorer",
}


def reference_on_top(env: str, on: list[str], folder: Path) -> Path:
    """The env's reference patch as a link on the incumbent `on`: each hook the incumbent has
    is replaced (the reference's own logic, not chained after the incumbent's: that
    composition is over the static node budget on WebShop), the others added."""
    from harness_r1.contracts import HookMode
    from harness_r1.sandbox.patchfile import REFERENCE_DIR, load_patch_file

    reference = load_patch_file(REFERENCE_DIR / f"{REFERENCE[env]}.patch")
    live = {hook.hook for hook in load_patch_file(Path(on[1]), env).hooks} if on else set()
    hooks = [
        hook.model_copy(update={"mode": HookMode.REPLACE}) if hook.hook in live else hook
        for hook in reference.hooks
    ]
    path = folder / f"{REFERENCE[env]}-on-{'incumbent' if on else 'base'}.json"
    path.write_text(reference.model_copy(update={"hooks": hooks}).model_dump_json())
    return path


def run_headroom(envs: list[str], out: Path, log: Path) -> None:
    """What a patch could still win on the held-out tasks: the target under the incumbent with
    the env's reference patch composed on top (a human-written harness fix, never shown to an
    engineer), beside the incumbent alone. An engineer's delta is bounded by this gap; where
    it is nil, no engineer can show a gain on these tasks."""
    results: dict[str, dict[str, Any]] = {}
    for env in envs:
        on = incumbent_on(env, out)
        deployed = "incumbent" if on else "base"  # ALFWorld's deployed harness is the base
        path = out / "headroom" / f"{env}-heldout-{deployed}+{REFERENCE[env]}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        reference = reference_on_top(env, on, path.parent)
        heldout_target_runs(env, [*on, "--on", str(reference)], path, log)
        results[env] = {
            deployed: rate(heldout_runs(env, out, log)),
            f"{deployed}+{REFERENCE[env]}": rate(path),
        }
    keep_results(
        "results-headroom.json", {**committed_results("results-headroom.json"), **results}, out
    )
    for env, rows in results.items():
        for condition, row in rows.items():
            low, high = row["ci"]
            print(
                f"| {env} | {condition} | {row['successes']}/{row['n']} [{low:.0%}, {high:.0%}] |"
            )


STAGES = (
    "baselines", "deployed", "coldstart", "sft", "sampling", "grpo", "rft", "engineers",
    "headroom", "ablation", "transfer", "coevolution", "reach",
)  # fmt: skip
#: the sampling sweep (stage "sampling"): the SFT engineer's held-out validity per temperature
SWEEP_TEMPERATURES = (0.0, 0.2, 0.5)


def run_deployed(envs: list[str], out: Path, log: Path) -> None:
    """How DEPLOYED_TEMPLATES was chosen: the target on the training split (TRAIN_TASKS, SEED)
    under each non-empty subset of stage 1's best patch's templates (same parameters), for
    the envs that deploy only part of it; for a hand-written incumbent (HAND_DEPLOYED) what
    `hand_deployed` compares. Training tasks only: the choice never looks at the held-out
    split. Merged into the committed results: a run over some envs keeps the others'."""
    results = {env: deployed_subsets(env, out, log) for env in envs if env in DEPLOYED_TEMPLATES}
    results |= {env: hand_deployed(env, out, log) for env in envs if env in HAND_DEPLOYED}
    if not results:
        print(f"no env of {envs} deploys part of a patch "
              f"({sorted([*DEPLOYED_TEMPLATES, *HAND_DEPLOYED])} do)")  # fmt: skip
        return
    keep_results(
        "results-deployed.json", {**committed_results("results-deployed.json"), **results}, out
    )
    for env, rows in results.items():
        for name, row in rows.items():
            mark = " (deployed)" if row["deployed"] else ""
            print(f"| {env} | {name}{mark} | {row['successes']}/{row['n']} |")


def deployed_subsets(env: str, out: Path, log: Path) -> dict[str, dict[str, Any]]:
    """The env's training success under each subset of stage 1's best patch's templates,
    keyed by the subset's names; each with its patch's SHA-256 (a run file of another patch
    is not reused: its name carries the hash)."""
    import itertools

    from harness_r1.trainer.teacher import TemplateTeacher

    best = out / f"{env}-stage1-best.txt"
    if not best.exists():
        best.write_text((COMMITTED / best.name).read_text(encoding="utf-8"), encoding="utf-8")
    _, chosen = stage1_choices(env, best.read_text(encoding="utf-8"))
    folder = out / "deployed"
    folder.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, Any]] = {}
    for size in range(1, len(chosen) + 1):
        for subset in itertools.combinations(chosen, size):
            name = "+".join(sorted(c.name for c in subset))
            part = TemplateTeacher().render_patch(env, list(subset))
            path = folder / f"{env}-{name}-{part.sha256()[:12]}.json"
            path.write_text(part.model_dump_json())
            runs = path.with_suffix(".train.jsonl")
            target_runs(env, SPLITS[env][0], TRAIN_TASKS[env], SEED, ["--on", str(path)], runs, log)
            rows[name] = {
                **rate(runs),
                "labels": [c.label() for c in subset],
                "patch_sha256": part.sha256(),
                "deployed": sorted(DEPLOYED_TEMPLATES[env]) == name.split("+"),
            }
    return rows


def hand_deployed(env: str, out: Path, log: Path) -> dict[str, dict[str, Any]]:
    """How a hand-written incumbent (HAND_DEPLOYED) compares on the training split (TRAIN_TASKS,
    SEED): the base harness, the incumbent, the incumbent with each of HAND_DEPLOYED's template
    calls on top (composed, as the canary composes an engineer's patch), and the env's whole
    reference patch. Each condition's runs are named by the patches that run (the base's are
    stage 1's file)."""
    from harness_r1.sandbox.patchfile import REFERENCE_DIR
    from harness_r1.trainer.teacher import TemplateTeacher, choices_in

    folder = out / "deployed"
    folder.mkdir(parents=True, exist_ok=True)
    on, digest = incumbent_on(env, out), incumbent_digest(env, out)[:12]
    conditions: dict[str, tuple[list[str], Path]] = {
        "base": ([], out / f"{env}-train-base.jsonl"),
        "incumbent": (on, folder / f"{env}-incumbent+{digest}.train.jsonl"),
    }
    for text in HAND_DEPLOYED[env]:
        name = text.split("(")[0]
        part = TemplateTeacher().render_patch(env, choices_in(f"templates: {name}. {text}."))
        path = folder / f"{env}-{name}-{part.sha256()[:12]}.json"
        path.write_text(part.model_dump_json())
        runs = folder / f"{env}-incumbent+{name}+{digest}+{part.sha256()[:12]}.train.jsonl"
        conditions[f"incumbent+{name}"] = ([*on, "--on", str(path)], runs)
    reference = ["--on", str(REFERENCE_DIR / f"{REFERENCE[env]}.patch")]
    conditions[REFERENCE[env]] = (reference, folder / f"{env}-{REFERENCE[env]}.train.jsonl")
    rows: dict[str, dict[str, Any]] = {}
    for name, (extra, runs) in conditions.items():
        target_runs(env, SPLITS[env][0], TRAIN_TASKS[env], SEED, extra, runs, log)
        rows[name] = {**rate(runs), "deployed": name == "incumbent"}
    return rows


def run_sampling(envs: list[str], out: Path, log: Path, packets: int) -> None:
    """The SFT engineer's held-out validity at each of SWEEP_TEMPERATURES (`packets` per env,
    K each): does sampling, not training, hold validity back? Pooled with Wilson 95%."""
    version = sft_version(out)
    assert version is not None, "stage 4 (SFT) first"
    rows, name = [], f"sft-{weights_sha(version)[:8]}"  # results kept per weights
    for temperature in SWEEP_TEMPERATURES:
        per_env = {
            env: validity(env, version, name, out, log, temperature, packets) for env in envs
        }
        row = {"temperature": temperature, "steps": sft_steps(version), **pooled_validity(per_env)}
        rows.append(row)
        low, high = row["ci"]
        each = ", ".join(f"{env} {s['valid']}/{s['proposals']}" for env, s in per_env.items())
        print(f"temperature {temperature}: {row['valid']}/{row['proposals']} "
              f"[{low:.0%}, {high:.0%}] {each}")  # fmt: skip
    results = f"results-sampling-p{packets}.json"
    keep_results(results, rows, out)


#: the reach probe: many samples at GRPO's high end of temperature, no canary
REACH_SAMPLING = ["-k", "16", "--temperature", "1.0", "--seed", "0", "--max-new-tokens", "512"]


def template_counts(report: dict[str, Any]) -> dict[str, dict[str, int]]:
    """A report's samples counted by the template they name (`templates: NAME` in the
    description line; "code" for a patch of code, "no patch" for neither), valid and invalid."""
    counts: dict[str, Counter[str]] = {
        "valid_by_template": Counter(),
        "invalid_by_template": Counter(),
    }
    for packet in report["packets"]:
        for sample in packet["samples"]:
            found = re.search(r"templates: ([A-Za-z0-9_]+)", sample["text"])
            name = (
                found.group(1)
                if found
                else "code"
                if "# === hook" in sample["text"]
                else "no patch"
            )
            counts["valid_by_template" if sample["valid"] else "invalid_by_template"][name] += 1
    return {kind: dict(sorted(named.items())) for kind, named in counts.items()}


def run_reach(envs: list[str], out: Path, log: Path, names: tuple[str, ...]) -> None:
    """What the trained engineers of `names` (SFT, SFT+GRPO, RFT) can sample at all on the
    env's held-out packets: REACH_SAMPLING (K=16 at temperature 1.0), validity only, counted
    by template. A call no sample names valid is one GRPO's reward cannot reach (issue 20:
    ALFWorld's winning `alfworld_take_place`, which the teacher finds and the engineers do
    not write at temperature 0.2). Merges per engineer into the committed results."""
    results: dict[str, dict[str, Any]] = {}
    for env in envs:
        results[env] = {}
        for name in (n for n in ("sft", "grpo", "rft") if n in names):
            args = engineer_args(name, out)
            if args is None:
                continue
            k = option_value(REACH_SAMPLING, "-k")
            temperature = option_value(REACH_SAMPLING, "--temperature")
            tag = engineer_tag(env, out, args)
            path = out / "reach" / f"{env}-{name}-{tag}-k{k}-t{temperature}.json"
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                run([HR, "engineer", "evaluate", str(heldout_runs(env, out, log)), "--env", env,
                     "--split", SPLITS[env][1], *args, "--lean-prompt", *incumbent_on(env, out),
                     *REACH_SAMPLING, "--batch-size", str(BATCH), "--validity-only",
                     "--out", str(path)], log)  # fmt: skip
            report = json.loads(path.read_text())
            summary = report["summary"]
            results[env][name] = {
                "weights_sha256_12": adapter_weights(args),
                "incumbent_sha256": incumbent_digest(env, out),
                "sampling": REACH_SAMPLING,
                "packets": summary["packets"],
                "samples": summary["proposals"],
                "valid": summary["valid"],
                **template_counts(report),
            }
            print(f"{env} {name}: {summary['valid']}/{summary['proposals']} valid, "
                  f"{results[env][name]['valid_by_template']}")  # fmt: skip
    merged = committed_results("results-reach.json")
    for env, found in results.items():
        merged[env] = {**merged.get(env, {}), **found}
    keep_results("results-reach.json", merged, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
        elif stage == "reach":
            run_reach(envs, args.out, log, names)
        else:
            run_engineers(envs, args.out, log, names)


if __name__ == "__main__":
    main()
