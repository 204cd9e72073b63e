"""Patch intake: one wording of a refusal, one validator, one way to assemble a canary."""

from __future__ import annotations

from pathlib import Path

from harness_r1.contracts import HookCode, HookName, Patch
from harness_r1.envs import get_suite
from harness_r1.harness import RunConfig
from harness_r1.harness.policies import ScriptedPolicy
from harness_r1.sandbox.canary import BaselineCache, CanaryConfig
from harness_r1.sandbox.canary_factory import build_canary_runner
from harness_r1.sandbox.executor import IsolatedHooks, SandboxConfig
from harness_r1.sandbox.intake import check, rejection, static_validator
from harness_r1.sandbox.static import StaticLimits, check_patch

GOOD = Patch(
    env="dbbench",
    hooks=[HookCode(hook=HookName.PRE_DECISION, code="def hook(ctx, state):\n    return None\n")],
)
HOSTILE = Patch(
    env="dbbench",
    hooks=[
        HookCode(hook=HookName.PRE_DECISION, code="import os\ndef hook(ctx, state):\n    pass\n")
    ],
)


def test_a_refusal_is_the_first_violation_as_code_colon_message() -> None:
    report = check_patch(HOSTILE)
    first = report.violations[0]
    assert rejection(report) == f"{first.code}: {first.message}"
    assert str(first.code) == "top_level_statement"
    assert rejection(check_patch(GOOD)) is None
    assert check(HOSTILE) == rejection(report) and check(GOOD) is None


def test_the_validator_applies_its_limits() -> None:
    tight = StaticLimits(max_source_chars=20)
    assert static_validator()(GOOD) is None
    refusal = static_validator(tight)(GOOD)
    assert refusal is not None and refusal.startswith("source_too_long: ")
    assert check(GOOD, tight) == refusal


def test_the_canary_factory_assembles_isolated_workers_and_the_intake(tmp_path: Path) -> None:
    sandbox = SandboxConfig(call_budget_s=1.5)
    canary = CanaryConfig(invalid_reward=-0.25)
    cache = BaselineCache(tmp_path)
    runner = build_canary_runner(
        get_suite("dbbench"),
        ScriptedPolicy(["x"]),
        tmp_path,
        RunConfig(agent_id="t", max_steps=2, history_turns=1),
        sandbox=sandbox,
        canary=canary,
        limits=StaticLimits(max_source_chars=20),
        cache=cache,
    )
    assert runner.config is canary and runner.cache is cache
    assert runner.runtime.config.max_steps == 2 and runner.runtime.config.history_turns == 1
    assert runner.validator(GOOD) is not None  # the limits reached the validator
    hooks = runner.hooks_factory(GOOD, "cand-1")
    try:
        assert isinstance(hooks, IsolatedHooks)
        assert hooks.config is sandbox and hooks.overlay_id == "cand-1"
    finally:
        hooks.close()
