"""The one way to assemble a canary: the frozen target's runtime, isolated hook workers for the
candidates, the intake's static checks and the runner.

Callers differ only in the policy they bring (a daemon's configured target, a command's local
model, a test's scripted policy) and in how episodes run (`RunConfig`); everything else about
how a candidate is judged is decided here, once.
"""

from __future__ import annotations

import threading
from pathlib import Path

from harness_r1.envs import EnvSuite
from harness_r1.harness import HarnessRuntime, RunConfig
from harness_r1.models import Policy
from harness_r1.sandbox.canary import BaselineCache, CanaryConfig, CanaryProgress, CanaryRunner
from harness_r1.sandbox.executor import isolated_hooks_factory
from harness_r1.sandbox.intake import static_validator
from harness_r1.sandbox.metrics import SandboxMetrics
from harness_r1.sandbox.sandbox_config import SandboxConfig
from harness_r1.sandbox.static_report import StaticLimits


def build_canary_runner(
    suite: EnvSuite,
    policy: Policy,
    data_root: Path,
    run: RunConfig,
    *,
    sandbox: SandboxConfig | None = None,
    canary: CanaryConfig | None = None,
    limits: StaticLimits | None = None,
    cache: BaselineCache | None = None,
    progress: CanaryProgress | None = None,
    metrics: SandboxMetrics | None = None,
    cancel: threading.Event | None = None,
) -> CanaryRunner:
    """A canary for `suite` on `policy`: candidates in isolated workers (`sandbox`, their
    events counted in `metrics`), checked by the intake under `limits`; `progress` watches
    its episodes; setting `cancel` stops a run at its next decision round (RunCancelled)."""
    runtime = HarnessRuntime(suite, policy, data_root, run, cancel=cancel)
    return CanaryRunner(
        runtime,
        isolated_hooks_factory(sandbox, metrics),
        static_validator(limits),
        canary,
        cache,
        progress,
    )
