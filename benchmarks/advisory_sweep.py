"""Each advisory template of the library, alone, against the deployed agent: one canary with a
shared baseline on a held-out split, so the rows are paired (the same tasks and seeds).

It answers "which advice helps this model, and by how much", the question the demo's teacher
answers from one packet's signals: a template that loses here should not rank first there.
Every row carries its forced share and its patch-alone success (the gate's attribution
columns), so a row that wins by playing the task shows it.

    .venv/bin/python benchmarks/advisory_sweep.py --env webshop --split fixed_heldout \
        --limit 20 --max-steps 6 --history-turns 3 --out runs/advisory-sweep-webshop

Writes one `.patch` file per template (default parameters) under --out, runs `harness-r1
canary` on all of them at once and prints its table; the canary's JSON report is
`<out>/report.json`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from harness_r1.trainer import TemplateChoice, TemplateTeacher
from harness_r1.trainer.templates import TEMPLATES, templates_for


def advisory_names(env: str) -> list[str]:
    """The advisory templates that apply to env, by name."""
    return sorted(t.name for t in templates_for(env) if t.role == "advisory")


def write_patches(env: str, names: list[str], out: Path) -> list[Path]:
    teacher = TemplateTeacher()
    paths = []
    for name in names:
        patch = teacher.render_patch(env, [TemplateChoice.of(name)], description=name)
        path = out / f"{name}.json"
        path.write_text(patch.model_dump_json(indent=2))
        paths.append(path)
    return paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="webshop")
    parser.add_argument("--split", default="fixed_heldout")
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--history-turns", type=int, default=3)
    parser.add_argument("--lockstep", type=int, default=10)
    parser.add_argument("--templates", nargs="*", help="names (default: every advisory one)")
    parser.add_argument("--out", type=Path, default=Path("runs/advisory-sweep"))
    parser.add_argument("--hr", default=".venv/bin/harness-r1")
    args = parser.parse_args()
    names = args.templates or advisory_names(args.env)
    unknown = [n for n in names if n not in TEMPLATES]
    if unknown:
        parser.error(f"unknown templates: {unknown}")
    args.out.mkdir(parents=True, exist_ok=True)
    paths = write_patches(args.env, names, args.out)
    command = [
        args.hr, "canary", "--env", args.env, "--split", args.split,
        "--limit", str(args.limit), "--guard-limit", "0", "--seed", "0",
        "--lockstep", str(args.lockstep), "--max-steps", str(args.max_steps),
        "--history-turns", str(args.history_turns), "--max-new-tokens", "64",
        "--out", str(args.out / "report.json"),
    ]  # fmt: skip
    for path in paths:
        command += ["--patch", str(path)]
    print(" ".join(command), flush=True)
    started = time.monotonic()
    # the gate's advisory profile (the demo's): attribution limits on every candidate
    environ = {**os.environ, "HARNESS_R1_GATE__PROFILE": "advisory"}
    rc = subprocess.call(command, env=environ)
    print(f"wall {time.monotonic() - started:.0f} s", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
