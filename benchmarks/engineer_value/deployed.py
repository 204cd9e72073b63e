"""Stage deployed: the measurements behind an incumbent that is not stage 1's whole best patch.

For an env that deploys only part of that patch (DEPLOYED_TEMPLATES), the target on the
training split under each subset of its templates; for a hand-written incumbent
(HAND_DEPLOYED), the base harness, the incumbent, the incumbent with the template it leaves to
a patch, and the whole reference patch. Training tasks only, so the choice of the deployed
harness never looks at the held-out split.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .baselines import stage1_choices
from .common import (
    committed_results,
    incumbent_digest,
    incumbent_on,
    keep_results,
    rate,
    target_runs,
)
from .settings import (
    COMMITTED,
    DEPLOYED_TEMPLATES,
    HAND_DEPLOYED,
    REFERENCE,
    SEED,
    SPLITS,
    TRAIN_TASKS,
)


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

    from harness_r1.trainer import TemplateTeacher

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
    from harness_r1.sandbox import REFERENCE_DIR
    from harness_r1.trainer import TemplateTeacher, choices_in

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
