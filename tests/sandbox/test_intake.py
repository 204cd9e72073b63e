"""Patch intake: one wording of a refusal, one validator, one way to assemble a canary."""

from __future__ import annotations

from pathlib import Path

from harness_r1.contracts import HookCode, HookName, Patch
from harness_r1.envs import get_suite
from harness_r1.harness import RunConfig
from harness_r1.harness.policies import ScriptedPolicy
from harness_r1.sandbox.canary import BaselineCache, CanaryConfig
from harness_r1.sandbox.canary_factory import build_canary_runner
from harness_r1.sandbox.executor import IsolatedHooks
from harness_r1.sandbox.intake import (
    BAD_TEMPLATE_CALL,
    RenderedCall,
    check,
    rejection,
    static_validator,
    take_in,
)
from harness_r1.sandbox.parse import render_completion
from harness_r1.sandbox.sandbox_config import SandboxConfig
from harness_r1.sandbox.static import check_patch
from harness_r1.sandbox.static_report import StaticLimits

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


# -- an engineer's text taken in once -------------------------------------------------------


def completion(patch: Patch) -> str:
    return render_completion(patch, "why")


def test_a_text_that_parses_and_checks_is_valid() -> None:
    taken = take_in(completion(GOOD), "dbbench")
    assert taken.valid and taken.stage is None and taken.patch == GOOD


def test_each_refusal_names_its_stage_and_code() -> None:
    unparsed = take_in("no patch here", "dbbench")
    assert (unparsed.valid, unparsed.stage, unparsed.patch) == (False, "parse", None)
    assert unparsed.reason == "no_patch_block" and unparsed.codes == ("no_patch_block",)

    scoped = take_in(completion(GOOD), "dbbench", hooks=(HookName.PRE_ACTION,))
    assert (scoped.stage, scoped.reason) == ("scope", "hook_not_allowed")
    assert "pre_decision" in scoped.message and scoped.patch == GOOD

    hostile = take_in(completion(HOSTILE), "dbbench")
    assert (hostile.stage, hostile.reason) == ("static", "top_level_statement")
    assert hostile.message.startswith("pre_decision line 1: ")


def test_a_rendered_call_is_checked_like_written_code() -> None:
    def renders_hostile(text: str, env: str, limits: StaticLimits | None) -> RenderedCall:
        return RenderedCall(patch=HOSTILE)

    taken = take_in("anything", "dbbench", render_call=renders_hostile)
    assert (taken.stage, taken.reason, taken.notes) == (
        "static",
        "top_level_statement",
        ("template call",),
    )


def test_a_bad_call_and_a_renderer_that_raises_are_refused_never_raised() -> None:
    def names_nothing(text: str, env: str, limits: StaticLimits | None) -> RenderedCall:
        return RenderedCall(error="template call: 'x' names no template of the library")

    def breaks(text: str, env: str, limits: StaticLimits | None) -> RenderedCall:
        raise KeyError("boom")

    refused = take_in("anything", "dbbench", render_call=names_nothing)
    assert (refused.stage, refused.reason) == ("parse", BAD_TEMPLATE_CALL)
    assert "names no template" in refused.message
    broken = take_in("anything", "dbbench", render_call=breaks)
    assert (broken.reason, broken.message) == (BAD_TEMPLATE_CALL, "template call: KeyError")


def test_text_that_is_no_call_is_parsed_as_written() -> None:
    def no_call(text: str, env: str, limits: StaticLimits | None) -> None:
        return None

    assert take_in(completion(GOOD), "dbbench", render_call=no_call).valid
