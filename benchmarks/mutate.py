"""Mutation testing of the critical modules, each against the tests that guard it (`make mutate`).

Why per module: mutmut runs, for every mutant, each selected test that touched the mutated
function. Against the whole suite an executor mutant that survives costs ~250 s of fleet,
guard-simulation and ALFWorld tests, and the run takes most of a day on 2 cores. The question
this answers is narrower and the one that matters: does the test module that guards this code
notice when it breaks? So each module gets its own mutmut project under `build/mutate/<name>/`
(a pyproject with its own `[tool.mutmut]`, links to `harness_r1/` and `tests/`), run with the
test files listed below. mutmut keeps its results there, so a stopped run resumes where it left
off; `benchmarks/mutation_score.py` reads every module's results.

    .venv/bin/python benchmarks/mutate.py [NAME ...]             # all modules, or only these
    .venv/bin/python benchmarks/mutate.py --recheck [NAME ...]   # survivors again, after new tests

mutmut keeps a verdict once reached; `--recheck` names the survivors so they run again.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build" / "mutate"

#: the agent-side client's tests, one file per behaviour
CLIENT_TESTS = [
    "tests/deploy/test_client.py",
    "tests/deploy/test_client_refusals.py",
    "tests/deploy/test_client_control.py",
    "tests/deploy/test_client_restart.py",
    "tests/deploy/test_client_operations.py",
]

#: name -> (the source file, the test files that guard it; a file not there yet is skipped)
MODULES: dict[str, tuple[str, list[str]]] = {
    "static": (
        "harness_r1/sandbox/static_checker.py",
        [
            "tests/sandbox/test_static.py",
            "tests/sandbox/test_static_messages.py",
            "tests/sandbox/test_parse.py",
        ],
    ),
    "gate": ("harness_r1/sandbox/gate.py", ["tests/sandbox/test_gate.py"]),
    "canary": (
        "harness_r1/sandbox/canary.py",
        [
            "tests/sandbox/test_canary.py",
            "tests/sandbox/test_canary_baseline.py",
            "tests/sandbox/test_canary_infrastructure.py",
            "tests/sandbox/test_canary_controls.py",
        ],
    ),
    "executor": (
        "harness_r1/sandbox/executor.py",
        [
            "tests/sandbox/test_isolation.py",
            "tests/sandbox/test_executor.py",
            "tests/sandbox/test_executor_faults.py",
            "tests/sandbox/test_executor_worker.py",
        ],
    ),
    "worker_process": (
        "harness_r1/sandbox/worker_process.py",
        [
            "tests/sandbox/test_isolation.py",
            "tests/sandbox/test_executor.py",
            "tests/sandbox/test_executor_faults.py",
            "tests/sandbox/test_executor_worker.py",
        ],
    ),
    "signing": (
        "harness_r1/deploy/signing.py",
        ["tests/deploy/test_signing.py", *CLIENT_TESTS],
    ),
    "client": ("harness_r1/deploy/client.py", CLIENT_TESTS),
    "guard": ("harness_r1/deploy/guard.py", ["tests/deploy/test_guard.py"]),
    "ingest": (
        "harness_r1/daemon/ingest.py",
        [
            "tests/daemon/test_ingest_units.py",
            "tests/daemon/test_ingest_poison.py",
            "tests/daemon/test_ingest_skip.py",
            "tests/daemon/test_foreign_ingest.py",
            "tests/daemon/test_deadletter_outbox.py",
        ],
    ),
}

#: Statistical simulations that take a minute each and assert error rates, not logic: they stay
#: in `make test`; a mutant they alone would catch is listed as left.
DESELECT = ["tests/deploy/test_guard.py::test_false_rollback_rate_under_no_difference_is_bounded"]


def project_toml(source: str, tests: list[str]) -> str:
    """The repository's pyproject.toml (pytest settings included) with this module's mutmut
    section in place of the repository's."""
    text = (ROOT / "pyproject.toml").read_text()
    text = re.sub(r"\n\[tool\.mutmut\]\n.*?(?=\n\[|\Z)", "\n", text, flags=re.S)
    present = [t for t in tests if (ROOT / t).is_file()]
    args = [arg for test in DESELECT for arg in ("--deselect", test)]
    return (
        text.rstrip()
        + "\n\n[tool.mutmut]\n"
        + 'source_paths = ["harness_r1"]\n'
        + f'only_mutate = ["{source}"]\n'
        + f"pytest_add_cli_args_test_selection = {present!r}\n".replace("'", '"')
        + f"pytest_add_cli_args = {args!r}\n".replace("'", '"')
    )


def prepare(name: str) -> Path:
    source, tests = MODULES[name]
    where = BUILD / name
    where.mkdir(parents=True, exist_ok=True)
    for link in ("harness_r1", "tests"):
        path = where / link
        if not path.is_symlink():
            path.symlink_to(ROOT / link)
    (where / "pyproject.toml").write_text(project_toml(source, tests))
    return where


def survivors(where: Path) -> list[str]:
    """The mutants of the last results that no test killed."""
    results = where / "results.txt"
    if not results.is_file():
        return []
    rows = (line.strip().rpartition(": ") for line in results.read_text().splitlines())
    return [name for name, _, status in rows if status in ("survived", "no tests")]


def run(name: str, recheck: bool = False) -> int:
    where = prepare(name)
    mutmut = Path(sys.executable).with_name("mutmut")
    env = dict(os.environ)
    env.setdefault("HARNESS_R1_DATA", str((ROOT.parent / "shared" / "benchmarks").resolve()))
    names = survivors(where) if recheck else []
    if recheck and not names:
        print(f"== {name}: no survivors to recheck", flush=True)
        return 0
    print(f"== {name}: {MODULES[name][0]}", flush=True)
    code = subprocess.run([str(mutmut), "run", *names], cwd=where, env=env).returncode
    results = subprocess.run(
        [str(mutmut), "results", "--all", "true"], cwd=where, capture_output=True, text=True
    )
    (where / "results.txt").write_text(results.stdout)
    return code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="*", help=f"any of {', '.join(MODULES)} (default: all)")
    parser.add_argument("--recheck", action="store_true", help="run the survivors again")
    args = parser.parse_args()
    names = args.names or list(MODULES)
    unknown = sorted(set(names) - set(MODULES))
    if unknown:
        parser.error(f"unknown module(s) {unknown}; choose from {sorted(MODULES)}")
    failed = [name for name in names if run(name, args.recheck) != 0]
    if failed:
        sys.exit(f"mutmut failed for: {', '.join(failed)}")


if __name__ == "__main__":
    main()
