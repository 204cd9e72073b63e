"""Infrastructure failures in the canary, never a reward: flaky resets and a flaky model
backend retried, episodes that keep failing retried, logged and made an `infra_error`, a
baseline that keeps failing named by batch and episode, and refused or incomplete isolation or
a worker that cannot start, all infrastructure. On the tiny in-test env of canary_rig.py."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import structlog
from canary_rig import BATCH, OPEN, SUITE, DoorEnv, runner, validator

from harness_r1.contracts import CandidateResult, Patch
from harness_r1.harness import HarnessRuntime, HookSet, RunConfig
from harness_r1.harness.policies import ScriptedPolicy
from harness_r1.models.base import PolicyError
from harness_r1.sandbox.canary import CanaryRunner, Candidate, InfraFailure
from harness_r1.sandbox.executor import IsolatedHooks
from harness_r1.sandbox.sandbox_config import SandboxConfig

pytestmark = pytest.mark.usefixtures("door_env_reset")


def test_flaky_infrastructure_is_retried() -> None:
    DoorEnv.fail_resets = 3
    report = runner(ScriptedPolicy(["ACTION: dance"])).evaluate(BATCH, [Candidate("open", OPEN)])
    assert report.candidates[0].status == "evaluated"
    assert report.candidates[0].delta_success == pytest.approx(0.5)


def test_flaky_resets_are_retried_not_counted_as_failed_episodes() -> None:
    """The first 3 resets fail (d0, d1, d2 of the baseline): they are re-run, so the baseline
    still wins every even task."""
    DoorEnv.fail_resets = 3
    canary = runner(ScriptedPolicy(["ACTION: open door"]))
    report = canary.evaluate(BATCH, [])
    assert report.baseline_success_rate == 0.5
    assert (DoorEnv.reset_calls, DoorEnv.resets) == (8 + 3, 8)


def test_persistent_infrastructure_failure_is_never_a_reward(dancing_canary: CanaryRunner) -> None:
    dancing_canary.baseline(BATCH)  # baseline cached while the engine works
    DoorEnv.always_fail = True
    report = dancing_canary.evaluate(BATCH, [Candidate("open", OPEN)])
    [result] = report.candidates
    assert result.status == "infra_error" and result.reward is None and result.delta_success is None


def test_episodes_that_keep_failing_are_retried_logged_and_never_a_reward() -> None:
    """`infra_retries` re-runs: 1 + 2 attempts per episode, then one error line per episode
    that never finished, and the candidate is an infra_error whatever it might have scored."""
    canary = runner(ScriptedPolicy(["ACTION: dance"]), infra_retries=2)
    canary.baseline(BATCH)
    DoorEnv.always_fail, DoorEnv.reset_calls = True, 0
    with structlog.testing.capture_logs() as logs:
        report = canary.evaluate(BATCH, [Candidate("open", OPEN)])
    assert DoorEnv.reset_calls == 8 * 3
    assert report.candidates == [
        CandidateResult(
            candidate_id="open",
            patch_sha256=OPEN.sha256(),
            composed_sha256=OPEN.sha256(),
            status="infra_error",
            invalid_reason="infra: episodes kept failing after retries",
        )
    ]
    prefix = f"canary-{BATCH.batch_id[:12]}-open"
    assert [e for e in logs if e["event"].startswith("canary.")] == [
        {"event": "canary.infra_failure", "log_level": "error", "trajectory_id": f"{prefix}-{i}"}
        for i in range(8)
    ]


def test_a_model_backend_failure_is_retried_and_logged() -> None:
    failures: list[str] = []

    def flaky(messages: Sequence[Any]) -> str:
        if not failures:
            failures.append("backend down")
            raise PolicyError("backend down")
        return "ACTION: open door"

    canary = runner(ScriptedPolicy(flaky))
    with structlog.testing.capture_logs() as logs:
        base, cached = canary.baseline(BATCH)
    assert [o.success for o in base] == [i % 2 == 0 for i in range(8)] and not cached
    assert [e for e in logs if e["event"].startswith("canary.")] == [
        {
            "event": "canary.policy_error",
            "log_level": "warning",
            "attempt": 0,
            "error": "backend down",
        }
    ]


def test_a_baseline_that_keeps_failing_names_its_batch_and_episodes() -> None:
    def down(messages: Sequence[Any]) -> str:
        raise PolicyError("backend down")

    canary = runner(ScriptedPolicy(down), infra_retries=1)
    batch_id = BATCH.batch_id[:12]
    with structlog.testing.capture_logs() as logs, pytest.raises(InfraFailure) as failure:
        canary.baseline(BATCH)
    assert str(failure.value) == f"baseline of batch {batch_id}: episodes kept failing"
    warning = {"event": "canary.policy_error", "log_level": "warning", "error": "backend down"}
    assert [e for e in logs if e["event"].startswith("canary.")] == [
        {**warning, "attempt": 0},
        {**warning, "attempt": 1},
        *(
            {
                "event": "canary.infra_failure",
                "log_level": "error",
                "trajectory_id": f"canary-{batch_id}-base-{i}",
            }
            for i in range(8)
        ),
    ]


def test_refused_isolation_is_infrastructure_not_a_reward() -> None:
    runtime = HarnessRuntime(SUITE, ScriptedPolicy(["ACTION: dance"]), Path("."), RunConfig())

    def refused(p: Patch, candidate_id: str) -> HookSet:
        return IsolatedHooks(p, SandboxConfig(fail_layer="landlock"), overlay_id=candidate_id)

    canary = CanaryRunner(runtime, refused, validator)
    [result] = canary.evaluate(BATCH, [Candidate("open", OPEN)]).candidates
    assert result.status == "infra_error" and result.reward is None
    assert result.invalid_reason == "infra: isolation refused"


def test_an_unisolated_worker_is_infrastructure_never_evaluated() -> None:
    """`allow_unisolated` lets a worker run without a layer (development): the canary must not
    turn what such a worker did into a reward."""
    runtime = HarnessRuntime(SUITE, ScriptedPolicy(["ACTION: dance"]), Path("."), RunConfig())

    def unisolated(p: Patch, candidate_id: str) -> HookSet:
        config = SandboxConfig(fail_layer="landlock", allow_unisolated=True)
        return IsolatedHooks(p, config, overlay_id=candidate_id)

    canary = CanaryRunner(runtime, unisolated, validator)
    [result] = canary.evaluate(BATCH, [Candidate("open", OPEN)]).candidates
    assert result.status == "infra_error" and result.reward is None
    assert result.delta_success is None and result.invalid_reason == "infra: isolation refused"
    assert result.sandbox_events.get("unisolated_workers") == 1


def test_a_worker_that_cannot_start_is_infrastructure_even_when_isolated() -> None:
    """The worker started with every layer in force, then failed to load the hooks (here: the
    load request is over the size limit). Its hooks never ran: not a patch with no effect."""
    config = SandboxConfig(max_request_bytes=64, restart_backoff_s=30.0)

    def factory(p: Patch, candidate_id: str) -> HookSet:
        hooks = IsolatedHooks(p, config, overlay_id=candidate_id)
        assert hooks.isolated
        return hooks

    runtime = HarnessRuntime(SUITE, ScriptedPolicy(["ACTION: dance"]), Path("."), RunConfig())
    canary = CanaryRunner(runtime, factory, validator)
    assert canary.evaluate(BATCH, [Candidate("open", OPEN)]).candidates == [
        CandidateResult(
            candidate_id="open",
            patch_sha256=OPEN.sha256(),
            composed_sha256=OPEN.sha256(),
            status="infra_error",
            invalid_reason="infra: isolation refused",
            sandbox_events={"start_failures": 1},
        )
    ]
