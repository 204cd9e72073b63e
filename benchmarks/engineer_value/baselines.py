"""Stage baselines (with `--teacher`, stage 2 too): where every engineer is measured from.

The frozen target on the training split under the base harness; one round of the template
teacher on its failures, whose best kept patch (whole, or the part DEPLOYED_TEMPLATES keeps)
becomes the env's **incumbent**, the deployed harness every engineer is trained and judged
against (written by hand instead where HAND_DEPLOYED says so); then the held-out success under
the base harness, the incumbent, and the incumbent with Self-Refine. With `--teacher` the
teacher itself proposes on held-out packets, as in the first report. Each env's results go to
their own file, so envs can run in separate invocations.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .common import (
    committed_results,
    heldout_target_runs,
    incumbent_on,
    rate,
    run,
    target_runs,
    trajectories,
)
from .settings import (
    BATCH,
    DEPLOYED_TEMPLATES,
    HAND_DEPLOYED,
    HR,
    SEED,
    SPLITS,
    TARGET,
    TARGET_POLICY,
    TRAIN_TASKS,
    K,
)


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


def deployed_part(env: str, text: str) -> str:
    """Stage 1's best patch (`text`, the teacher's completion) as the env's incumbent: whole,
    or re-rendered with only DEPLOYED_TEMPLATES' templates (same parameters, same order)."""
    from harness_r1.trainer import TemplateTeacher, render_completion
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
    from harness_r1.sandbox import parse_engineer_output
    from harness_r1.trainer import choices_in

    patch = parse_engineer_output(text, env=env).patch
    assert patch is not None, f"{env}: stage 1's best patch does not parse"
    chosen = choices_in(patch.description)
    assert chosen, f"{env}: stage 1's best patch names no template"
    return patch, chosen


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
