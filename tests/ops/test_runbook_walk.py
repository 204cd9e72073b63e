"""The operations runbook walked end to end: benchmarks/runbook_walk.sh runs docs/operations.md's
commands in order against a local broker and a real daemon and checks what each step says it
shows (readiness, the unreplayable warning and count, the dead letters and the outbox, a pool
paused then rolled back by an operator and the daemon counting it, a partition reset, a clean
SIGTERM, a JSON-only log)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_the_runbook_walks_end_to_end() -> None:
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "HR": str(bin_dir / "harness-r1"), "PY": sys.executable}
    env = {
        k: v for k, v in env.items() if not k.startswith("HARNESS_R1_") or k == "HARNESS_R1_DATA"
    }
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "runbook_walk.sh")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "runbook walked: every step as documented" in done.stdout
