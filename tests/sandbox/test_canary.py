"""The canary runner on a tiny in-test env (a test double for a real env's rules), with real
isolated hook workers running the candidate patches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness_r1.contracts import HookCode, HookName, Patch, TaskSpec
from harness_r1.envs.base import EnvError, EnvSuite, StepResult
from harness_r1.harness import HarnessRuntime, HookSet, RunConfig
from harness_r1.harness.policies import ScriptedPolicy
from harness_r1.sandbox.canary import (
    BaselineCache,
    CanaryBatch,
    CanaryConfig,
    CanaryRunner,
    Candidate,
)
from harness_r1.sandbox.executor import IsolatedHooks, SandboxConfig
from harness_r1.sandbox.static import check_patch


class DoorEnv:
    """`open door` wins on even task numbers; odd tasks are solved by `look` then `open door`.
    `fail_resets` makes the first N resets raise EnvError (flaky infrastructure)."""

    name = "door"
    fail_resets = 0
    always_fail = False
    trap_action: str | None = None  # an action on which the engine breaks (EnvError)
    resets = 0  # successful resets, over all instances: the episodes really run

    def __init__(self) -> None:
        self.done = False
        self.looked = False
        self.task = ""

    def reset(self, task: TaskSpec, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        if DoorEnv.always_fail:
            raise EnvError("engine down")
        if DoorEnv.fail_resets > 0:
            DoorEnv.fail_resets -= 1
            raise EnvError("flaky engine")
        DoorEnv.resets += 1
        self.done, self.looked, self.task = False, False, task.task_id
        return "A room with a door.", {"admissible_actions": ["open door", "look"]}

    def step(self, action: str) -> StepResult:
        if self.done:
            raise EnvError("over")
        if action == DoorEnv.trap_action:
            raise EnvError(f"engine broke on {action!r}")
        info: dict[str, Any] = {"admissible_actions": ["open door", "look"]}
        if action == "look":
            self.looked = True
            return StepResult("You see a door.", 0.0, False, False, info)
        if action == "open door":
            self.done = True
            won = int(self.task[1:]) % 2 == 0 or self.looked
            return StepResult("Opened.", float(won), True, False, {**info, "success": won})
        return StepResult("Nothing happens.", 0.0, False, False, {**info, "invalid_action": True})

    def close(self) -> None:
        pass


class Prompter:
    def system_prompt(self, task: TaskSpec) -> str:
        return "Open the door."

    def first_message(self, task: TaskSpec, observation: str, info: dict[str, Any]) -> str:
        return observation

    def feedback_message(self, observation: str, info: dict[str, Any]) -> str:
        return observation

    def extract_action(self, raw_output: str, info: dict[str, Any]) -> str:
        return raw_output.removeprefix("ACTION: ")


SUITE = EnvSuite(
    name="door",
    splits=("t",),
    default_max_steps=4,
    make_env=lambda root: DoorEnv(),
    load_tasks=lambda root, split: [],
    prompter=Prompter(),
    data_files=lambda root: {},
)
TASKS = tuple(
    TaskSpec(env="door", split="t", task_id=f"d{i}", task_type="door", instruction="x", max_steps=4)
    for i in range(8)
)
BATCH = CanaryBatch("door", TASKS, tuple(range(8)))


def patch(code: str, hook: HookName = HookName.PRE_ACTION) -> Patch:
    return Patch(env="door", hooks=[HookCode(hook=hook, code=code)])


OPEN = patch("def hook(ctx, state):\n    return {'effect': 'force', 'text': 'open door'}\n")
LOOK_THEN_OPEN = patch(
    "def hook(ctx, state):\n"
    "    if ctx['step'] == 0:\n"
    "        return {'effect': 'force', 'text': 'look'}\n"
    "    return {'effect': 'force', 'text': 'open door'}\n"
)
RAISING = patch("def hook(ctx, state):\n    return ctx['missing']\n")
HOSTILE = patch("import os\ndef hook(ctx, state):\n    return None\n")


@pytest.fixture(autouse=True)
def _reset_env_flags() -> None:
    DoorEnv.fail_resets = 0
    DoorEnv.always_fail = False
    DoorEnv.resets = 0


def validator(p: Patch) -> str | None:
    report = check_patch(p)
    return None if report.ok else f"{report.violations[0].code}: {report.violations[0].message}"


def runner(policy: ScriptedPolicy, **config: Any) -> CanaryRunner:
    runtime = HarnessRuntime(SUITE, policy, Path("."), RunConfig(lockstep=32))
    sandbox = SandboxConfig()

    def factory(p: Patch, candidate_id: str) -> HookSet:
        return IsolatedHooks(p, sandbox, overlay_id=candidate_id)

    return CanaryRunner(runtime, factory, validator, CanaryConfig(**config), BaselineCache())


def test_paired_deltas_invalid_reward_and_a_shared_batched_baseline() -> None:
    policy = ScriptedPolicy(["ACTION: dance"])
    canary = runner(policy, invalid_reward=-0.5)
    candidates = [
        Candidate("open", OPEN),
        Candidate("look-open", LOOK_THEN_OPEN),
        Candidate("raising", RAISING),
        Candidate("hostile", HOSTILE),
    ]
    report = canary.evaluate(BATCH, candidates)
    assert report.baseline_success_rate == 0.0 and not report.baseline_cached
    assert report.baseline_cost.episodes == 8
    by_id = {c.candidate_id: c for c in report.candidates}
    assert by_id["open"].delta_success == pytest.approx(0.5)  # even tasks only
    assert by_id["look-open"].delta_success == pytest.approx(1.0)
    assert by_id["raising"].delta_success == 0.0
    # one pre_action call per step, each raising: exactly one fault per step, counted once
    raising = by_id["raising"]
    assert raising.sandbox_events == {"raised": raising.cost.steps}
    assert by_id["open"].applied_effects == {"force": 8} and by_id["open"].cost.steps == 8
    hostile = by_id["hostile"]
    assert hostile.status == "invalid" and hostile.reward == -0.5
    assert hostile.invalid_reason is not None and hostile.invalid_reason.startswith(
        "top_level_statement"
    )
    assert [p.task_id for p in by_id["open"].pairs] == [t.task_id for t in TASKS]
    assert all(p.seed == i for i, p in enumerate(by_id["open"].pairs))
    assert by_id["look-open"].reward == pytest.approx(1.0)
    low, high = by_id["open"].delta_interval or (0, 0)
    assert low <= 0.5 <= high
    # 4 decision rounds for the baseline; candidates' episodes share batched rounds
    calls_after_first = policy.calls
    again = canary.evaluate(BATCH, [Candidate("open2", OPEN)])
    assert again.baseline_cached and again.baseline_cost.episodes == 0
    assert again.candidates[0].delta_success == pytest.approx(0.5)
    assert policy.calls - calls_after_first <= 1  # forced actions: one round, no baseline rerun


def test_episodes_cost_n_plus_kn_not_2kn() -> None:
    canary = runner(ScriptedPolicy(["ACTION: dance"]))
    report = canary.evaluate(BATCH, [Candidate(f"c{i}", OPEN) for i in range(4)])
    episodes = report.baseline_cost.episodes + sum(c.cost.episodes for c in report.candidates)
    assert episodes == 8 + 4 * 8  # naive design: 2 * 4 * 8 = 64
    assert DoorEnv.resets == 8 + 4 * 8  # counted by the env itself, not by the runner


def test_flaky_infrastructure_is_retried() -> None:
    DoorEnv.fail_resets = 3
    report = runner(ScriptedPolicy(["ACTION: dance"])).evaluate(BATCH, [Candidate("open", OPEN)])
    assert report.candidates[0].status == "evaluated"
    assert report.candidates[0].delta_success == pytest.approx(0.5)


def test_persistent_infrastructure_failure_is_never_a_reward() -> None:
    canary = runner(ScriptedPolicy(["ACTION: dance"]))
    canary.baseline(BATCH)  # baseline cached while the engine works
    DoorEnv.always_fail = True
    report = canary.evaluate(BATCH, [Candidate("open", OPEN)])
    [result] = report.candidates
    assert result.status == "infra_error" and result.reward is None and result.delta_success is None


def test_refused_isolation_is_infrastructure_not_a_reward() -> None:
    runtime = HarnessRuntime(SUITE, ScriptedPolicy(["ACTION: dance"]), Path("."), RunConfig())

    def refused(p: Patch, candidate_id: str) -> HookSet:
        return IsolatedHooks(p, SandboxConfig(fail_layer="landlock"), overlay_id=candidate_id)

    canary = CanaryRunner(runtime, refused, validator)
    [result] = canary.evaluate(BATCH, [Candidate("open", OPEN)]).candidates
    assert result.status == "infra_error" and result.reward is None
    assert result.invalid_reason == "infra: isolation refused"


def test_candidate_ids_must_be_unique() -> None:
    with pytest.raises(ValueError, match="unique"):
        runner(ScriptedPolicy(["x"])).evaluate(BATCH, [Candidate("a", OPEN), Candidate("a", OPEN)])


def test_batch_must_be_consistent() -> None:
    with pytest.raises(ValueError):
        CanaryBatch("door", TASKS, (1, 2))


def test_control_run_measures_pairing_noise() -> None:
    canary = runner(ScriptedPolicy(["ACTION: dance"]), control=True)
    report = canary.evaluate(BATCH, [Candidate("open", OPEN)])
    assert [c.candidate_id for c in report.candidates] == ["open"]
    assert report.control is not None and report.control.delta_success == 0.0
    assert report.control.patch_sha256 is None and report.control.cost.episodes == 8


def test_baselines_are_shared_only_by_targets_run_the_same_way() -> None:
    from harness_r1.harness.policies.base import SamplingConfig
    from harness_r1.harness.policies.openai_http import OpenAIChatPolicy

    def key(**kwargs: Any) -> str:
        lockstep = kwargs.pop("lockstep", 8)
        policy = OpenAIChatPolicy("http://127.0.0.1:9", "m", **kwargs)
        runtime = HarnessRuntime(SUITE, policy, Path("."), RunConfig(lockstep=lockstep))
        return CanaryRunner(
            runtime, lambda p, c: IsolatedHooks(p, SandboxConfig()), validator
        ).baseline_key(BATCH)

    same = key(sampling=SamplingConfig(max_new_tokens=64))
    assert key(sampling=SamplingConfig(max_new_tokens=64)) == same
    assert key(sampling=SamplingConfig(max_new_tokens=96)) != same
    assert key(sampling=SamplingConfig(max_new_tokens=64, temperature=0.7)) != same
    assert key(sampling=SamplingConfig(max_new_tokens=64), lockstep=1) != same


def test_each_pair_holds_its_own_tasks_patched_outcome() -> None:
    """`open door` wins only on even tasks: a pair must carry that task's own patched outcome
    (sums over the batch cannot tell a shuffled pairing from the right one)."""
    report = runner(ScriptedPolicy(["ACTION: dance"])).evaluate(BATCH, [Candidate("open", OPEN)])
    [result] = report.candidates
    assert [(p.task_id, p.seed) for p in result.pairs] == [
        (t.task_id, s) for t, s in zip(BATCH.tasks, BATCH.seeds, strict=True)
    ]
    assert [p.patched_success for p in result.pairs] == [i % 2 == 0 for i in range(8)]
    assert [p.patched_reward for p in result.pairs] == [float(i % 2 == 0) for i in range(8)]


def test_pairing_of_outcomes_from_other_tasks_is_refused() -> None:
    from harness_r1.sandbox.canary import EpisodeOutcome, InfraFailure, _check_pairing

    def outcome(task_id: str, seed: int) -> EpisodeOutcome:
        return EpisodeOutcome(task_id, seed, False, 0.0, 0, 0.0)

    base = [outcome("d0", 0), outcome("d1", 1)]
    _check_pairing(base, [outcome("d0", 0), outcome("d1", 1)])
    with pytest.raises(InfraFailure, match="pairing"):
        _check_pairing(base, [outcome("d1", 1), outcome("d0", 0)])
    with pytest.raises(InfraFailure, match="pairing"):
        _check_pairing(base, [outcome("d0", 5), outcome("d1", 1)])


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


SMASH = patch("def hook(ctx, state):\n    return {'effect': 'force', 'text': 'smash door'}\n")


def test_an_env_error_after_the_patchs_own_action_is_the_patchs_failure() -> None:
    """The env breaks on an action only the patch forced: that episode is a failure the patch
    caused (evaluated, delta counted), not infrastructure to retry and give up on."""
    DoorEnv.trap_action = "smash door"
    try:
        canary = runner(ScriptedPolicy(["ACTION: open door"]), infra_retries=1)
        report = canary.evaluate(BATCH, [Candidate("smash", SMASH)])
    finally:
        DoorEnv.trap_action = None
    [result] = report.candidates
    assert report.baseline_success_rate == pytest.approx(0.5)
    assert result.status == "evaluated" and result.delta_success == pytest.approx(-0.5)
    assert result.applied_effects == {"force": 8} and result.cost.episodes == 8
    assert DoorEnv.resets == 8 + 8  # the patch's episodes ran once each: none retried
