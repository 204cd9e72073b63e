"""The canary runner on a tiny in-test env (a test double for a real env's rules), with real
isolated hook workers running the candidate patches."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import structlog

from harness_r1.contracts import (
    CanaryReport,
    CandidateCost,
    CandidateResult,
    HookCode,
    HookName,
    OriginCounts,
    PairedTask,
    Patch,
    TargetRef,
    TaskSpec,
    Trajectory,
)
from harness_r1.envs.base import EnvError, EnvSuite, StepResult
from harness_r1.harness import EpisodeSpec, HarnessRuntime, HookSet, NoHooks, RunConfig
from harness_r1.harness.policies import ScriptedPolicy
from harness_r1.harness.policies.base import PolicyError, SamplingConfig
from harness_r1.sandbox.canary import (
    BASE,
    BaselineCache,
    CanaryBatch,
    CanaryConfig,
    CanaryRunner,
    Candidate,
    EpisodeOutcome,
    Incumbent,
    InfraFailure,
    generation_identity,
)
from harness_r1.sandbox.compose import Link
from harness_r1.sandbox.executor import IsolatedHooks, SandboxConfig
from harness_r1.sandbox.gate import PairedOutcome, bootstrap_delta_interval
from harness_r1.sandbox.static import check_patch


class DoorEnv:
    """`open door` wins on even task numbers; odd tasks are solved by `look` then `open door`.
    `fail_resets` makes the first N resets raise EnvError (flaky infrastructure)."""

    name = "door"
    fail_resets = 0
    always_fail = False
    trap_action: str | None = None  # an action on which the engine breaks (EnvError)
    resets = 0  # successful resets, over all instances: the episodes really run
    reset_calls = 0  # every reset asked for, failed ones included: the attempts made
    step_seconds = 0.0  # how long the engine takes per step

    def __init__(self) -> None:
        self.done = False
        self.looked = False
        self.task = ""

    def reset(self, task: TaskSpec, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        DoorEnv.reset_calls += 1
        if DoorEnv.always_fail:
            raise EnvError("engine down")
        if DoorEnv.fail_resets > 0:
            DoorEnv.fail_resets -= 1
            raise EnvError("flaky engine")
        DoorEnv.resets += 1
        self.done, self.looked, self.task = False, False, task.task_id
        return "A room with a door.", {"admissible_actions": ["open door", "look"]}

    def step(self, action: str) -> StepResult:
        time.sleep(DoorEnv.step_seconds)
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
    DoorEnv.reset_calls = 0
    DoorEnv.step_seconds = 0.0


def validator(p: Patch) -> str | None:
    report = check_patch(p)
    return None if report.ok else f"{report.violations[0].code}: {report.violations[0].message}"


def runner(policy: ScriptedPolicy, **config: Any) -> CanaryRunner:
    """A canary on the door env; without the patch-alone control unless asked for, so the
    episode counts of the tests below are the model's (the control has tests of its own)."""
    config.setdefault("patch_alone", False)
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
    distinct = [OPEN.model_copy(update={"description": f"open, take {i}"}) for i in range(4)]
    report = canary.evaluate(BATCH, [Candidate(f"c{i}", p) for i, p in enumerate(distinct)])
    episodes = report.baseline_cost.episodes + sum(c.cost.episodes for c in report.candidates)
    assert episodes == 8 + 4 * 8  # naive design: 2 * 4 * 8 = 64
    assert DoorEnv.resets == 8 + 4 * 8  # counted by the env itself, not by the runner
    DoorEnv.resets = 0
    policy = ScriptedPolicy(["ACTION: dance"])
    controlled = runner(policy, patch_alone=True)
    controlled.evaluate(BATCH, [Candidate(f"c{i}", p) for i, p in enumerate(distinct)])
    # each candidate's patch-alone control adds its n episodes, and no model call
    assert DoorEnv.resets == 8 + 4 * 8 + 4 * 8
    assert policy.calls == 4 + 1  # the baseline's 4 rounds, the candidates' 1 (forced: none)


ADVICE = patch(
    "def hook(ctx, state):\n    return 'The door opens with: open door'\n", HookName.PRE_DECISION
)


def test_patch_alone_control_runs_the_overlay_under_the_null_policy() -> None:
    """A forcing patch wins without the model (the harness alone); advice wins nothing there,
    however much it helps a model that reads it."""
    reader = ScriptedPolicy(
        lambda messages: "ACTION: open door" if "open door" in messages[-1]["content"] else "x"
    )
    canary = runner(reader, patch_alone=True)
    report = canary.evaluate(BATCH, [Candidate("open", OPEN), Candidate("advice", ADVICE)])
    by_id = {c.candidate_id: c for c in report.candidates}
    forced, advice = by_id["open"], by_id["advice"]
    assert forced.patch_alone is not None and advice.patch_alone is not None
    assert (forced.patch_alone.successes, forced.patch_alone.tasks) == (4, 8)  # even tasks
    assert forced.patch_alone.origins.forced == 8 and forced.forced_share == 1.0
    assert advice.delta_success == pytest.approx(0.5)  # the model read the note and acted
    assert advice.patch_alone.successes == 0 and advice.patch_alone_success == 0.0
    assert advice.forced_share == 0.0 and advice.origins.model == advice.origins.steps == 8
    assert report.baseline_origins.model == report.baseline_origins.steps > 0


def test_identical_candidates_run_once_and_are_judged_alike() -> None:
    """K samples that agree (an engineer that has learnt its patch) cost one candidate's
    episodes; each keeps its own id, and the ones that did not run report no cost."""
    canary = runner(ScriptedPolicy(["ACTION: dance"]))
    candidates = [Candidate("a", OPEN), Candidate("b", LOOK_THEN_OPEN), Candidate("c", OPEN)]
    report = canary.evaluate(BATCH, [*candidates, Candidate("d", OPEN)])
    assert DoorEnv.resets == 8 + 2 * 8  # the baseline, OPEN once, LOOK_THEN_OPEN once
    by_id = {c.candidate_id: c for c in report.candidates}
    assert [c.candidate_id for c in report.candidates] == ["a", "b", "c", "d"]
    for twin in ("c", "d"):
        assert by_id[twin].delta_success == by_id["a"].delta_success == pytest.approx(0.5)
        assert by_id[twin].pairs == by_id["a"].pairs
        assert by_id[twin].cost.episodes == 0 and by_id[twin].patch_sha256 == OPEN.sha256()
    assert by_id["a"].cost.episodes == 8 and by_id["b"].delta_success == pytest.approx(1.0)


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


def smash(effect: str) -> Patch:
    return patch(
        f"def hook(ctx, state):\n    return {{'effect': '{effect}', 'text': 'smash door'}}\n"
    )


@pytest.mark.parametrize("effect", ["force", "rewrite"])
def test_an_env_error_after_the_patchs_own_action_is_the_patchs_failure(effect: str) -> None:
    """The env breaks on an action only the patch chose (forced, or rewritten from the model's):
    that episode is a failure the patch caused (evaluated, delta counted), not infrastructure
    to retry and give up on."""
    DoorEnv.trap_action = "smash door"
    try:
        canary = runner(ScriptedPolicy(["ACTION: open door"]), infra_retries=1)
        report = canary.evaluate(BATCH, [Candidate("smash", smash(effect))])
    finally:
        DoorEnv.trap_action = None
    [result] = report.candidates
    assert report.baseline_success_rate == pytest.approx(0.5)
    assert result.status == "evaluated" and result.delta_success == pytest.approx(-0.5)
    assert result.delta_mean_reward == pytest.approx(-0.5)  # the wins it lost, reward 1 each
    assert result.applied_effects == {effect: 8} and result.cost.episodes == 8
    assert DoorEnv.resets == 8 + 8  # the patch's episodes ran once each: none retried


# -- Issue 21: whole results, so that a field computed wrong or dropped shows ---------------------

SKILLS = patch("def hook(ctx, state):\n    return 'Doors open.'\n", HookName.EPISODE_START)
START_RAISING = patch("def hook(ctx, state):\n    return ctx['missing']\n", HookName.EPISODE_START)


class RecordingRuntime(HarnessRuntime):
    """The real runtime, keeping what each run returned: the episodes' own timings are what a
    candidate's cost must add up."""

    def __init__(self, policy: ScriptedPolicy, config: RunConfig | None = None) -> None:
        super().__init__(SUITE, policy, Path("."), config or RunConfig(lockstep=64))
        self.runs: list[list[Trajectory]] = []

    def run(
        self,
        specs: Sequence[EpisodeSpec],
        on_done: Callable[[Trajectory], None] | None = None,
    ) -> list[Trajectory]:
        trajectories = super().run(specs, on_done)
        self.runs.append(trajectories)
        return trajectories


def seconds(trajectories: Sequence[Trajectory]) -> float:
    """What a candidate's cost reports: its episodes' model, env and hook time, to the ms."""
    timings = [t.timings for t in trajectories]
    return round(sum(t.model_seconds + t.env_seconds + t.hook_seconds for t in timings), 3)


def evaluated(
    candidate_id: str,
    sha: str | None,
    patched: list[bool],
    cost: CandidateCost,
    samples: int,
    alpha: float,
    events: dict[str, int] | None = None,
    effects: dict[str, int] | None = None,
) -> CandidateResult:
    """The result of a candidate run on BATCH against an all-failing baseline; its steps were
    all forced when it forced any (`effects`), else all the model's."""
    pairs = [
        PairedTask(
            task_id=t.task_id,
            seed=s,
            base_success=False,
            patched_success=won,
            base_reward=0.0,
            patched_reward=float(won),
        )
        for t, s, won in zip(BATCH.tasks, BATCH.seeds, patched, strict=True)
    ]
    delta = sum(patched) / len(patched)
    # the gate's own seeded bootstrap over the reported pairs: anyone can recompute it
    interval = bootstrap_delta_interval(
        [PairedOutcome(**p.model_dump()) for p in pairs], samples, alpha, seed=0
    )
    return CandidateResult(
        candidate_id=candidate_id,
        patch_sha256=sha,
        composed_sha256=sha,  # one patch on the base harness runs as it is
        status="evaluated",
        pairs=pairs,
        delta_success=delta,
        delta_mean_reward=delta,
        delta_interval=interval,
        sandbox_events=events or {},
        applied_effects=effects or {},
        origins=(
            OriginCounts(forced=cost.steps)
            if (effects or {}).get("force")
            else OriginCounts(model=cost.steps)
        ),
        cost=cost,
        reward=delta,
    )


def test_the_report_holds_each_candidates_whole_result_in_the_order_given() -> None:
    """Invalid candidates first (a parse failure, no patch, a static rejection), then runnable
    ones whose episode_start hook adds skills or raises, one that forces `open door`, and the
    control run: the whole report, every field, against what the episodes did."""
    samples, alpha = 25, 0.2  # few resamples: the interval shows which seed drew them
    DoorEnv.step_seconds = 0.001  # env time that a cost must count, next to the hooks' time
    runtime = RecordingRuntime(ScriptedPolicy(["ACTION: dance"]))
    made: list[tuple[str, str, IsolatedHooks]] = []

    def factory(p: Patch, candidate_id: str) -> HookSet:
        hooks = IsolatedHooks(p, SandboxConfig(), overlay_id=candidate_id)
        made.append((p.sha256(), candidate_id, hooks))
        return hooks

    config = CanaryConfig(
        invalid_reward=-0.5,
        bootstrap_samples=samples,
        alpha=alpha,
        control=True,
        patch_alone=False,  # tested on its own
    )
    canary = CanaryRunner(runtime, factory, validator, config, BaselineCache())
    candidates = [
        Candidate("unparsed", None, "parse_error: no hook found"),
        Candidate("empty", None),
        Candidate("hostile", HOSTILE),
        Candidate("skills", SKILLS),
        Candidate("start-raising", START_RAISING),
        Candidate("open", OPEN),
    ]
    started = time.perf_counter()
    report = canary.evaluate(BATCH, candidates)
    wall = time.perf_counter() - started

    # each valid patch got its own worker, named after its candidate; all stopped at the end
    assert [(sha, cid) for sha, cid, _ in made] == [
        (SKILLS.sha256(), "skills"),
        (START_RAISING.sha256(), "start-raising"),
        (OPEN.sha256(), "open"),
    ]
    assert [hooks.worker_pid for *_, hooks in made] == [None, None, None]
    # one baseline run, then every candidate and the control in one lockstep run, in order
    base_run, together = runtime.runs
    assert (len(base_run), len(together)) == (8, 4 * 8)
    skills, start_raising, opened, control = (together[i : i + 8] for i in range(0, 32, 8))
    assert 0 < report.baseline_cost.seconds <= wall + 0.0005

    def invalid(candidate_id: str, sha: str | None, reason: str) -> CandidateResult:
        return CandidateResult(
            candidate_id=candidate_id,
            patch_sha256=sha,
            status="invalid",
            invalid_reason=reason,
            reward=-0.5,
        )

    def cost(steps: int, tokens: int, trajectories: list[Trajectory]) -> CandidateCost:
        return CandidateCost(
            episodes=8, steps=steps, generated_tokens=tokens, seconds=seconds(trajectories)
        )

    evens = [i % 2 == 0 for i in range(8)]
    # `dance` for 4 steps costs 2 tokens a step; a forced `open door` ends in one step
    assert report == CanaryReport(
        batch_id=BATCH.batch_id,
        env="door",
        target=TargetRef(model_id="scripted", version="1"),
        tasks=8,
        baseline_cached=False,
        baseline_success_rate=0.0,
        baseline_cost=CandidateCost(
            episodes=8, steps=32, generated_tokens=64, seconds=report.baseline_cost.seconds
        ),
        baseline_origins=OriginCounts(model=32),
        candidates=[
            invalid("unparsed", None, "parse_error: no hook found"),
            invalid("empty", None, "no_patch: the candidate carries no patch"),
            invalid(
                "hostile",
                HOSTILE.sha256(),
                "top_level_statement: only function definitions and a docstring may appear"
                " at top level; move this `import` into a function",
            ),
            evaluated(
                "skills",
                SKILLS.sha256(),
                [False] * 8,
                cost(32, 64, skills),
                samples,
                alpha,
                effects={"skills": 8},
            ),
            evaluated(
                "start-raising",
                START_RAISING.sha256(),
                [False] * 8,
                cost(32, 64, start_raising),
                samples,
                alpha,
                events={"raised": 8},
            ),
            evaluated(
                "open",
                OPEN.sha256(),
                evens,
                cost(8, 16, opened),
                samples,
                alpha,
                effects={"force": 8},
            ),
        ],
        control=evaluated("control", None, [False] * 8, cost(32, 64, control), samples, alpha),
    )
    # the interval is the seeded bootstrap's, not any resampling's
    [*_, opened_result] = report.candidates
    pairs = [PairedOutcome(**p.model_dump()) for p in opened_result.pairs]
    assert opened_result.delta_interval != bootstrap_delta_interval(pairs, samples, alpha, seed=1)


def test_the_baseline_cost_is_reported_when_it_runs_and_zero_when_cached() -> None:
    canary = runner(ScriptedPolicy(["ACTION: dance"]))
    started = time.perf_counter()
    first = canary.evaluate(BATCH, [])
    wall = time.perf_counter() - started
    cost = first.baseline_cost
    # 8 episodes of 4 `dance` steps, 2 tokens each; timed to the millisecond
    assert (cost.episodes, cost.steps, cost.generated_tokens) == (8, 32, 64)
    assert 0 < cost.seconds <= wall + 0.0005 and cost.seconds == round(cost.seconds, 3)
    again = canary.evaluate(BATCH, [])
    assert again.baseline_cached and again.baseline_cost == CandidateCost()
    assert again.candidates == [] and again.control is None


def test_a_one_task_batch_reports_its_baseline_success_rate() -> None:
    """`open door` wins d0: the rate of a one-task batch is that task's outcome, 1.0."""
    canary = runner(ScriptedPolicy(["ACTION: open door"]))
    report = canary.evaluate(CanaryBatch("door", TASKS[:1], (0,)), [])
    assert report.baseline_success_rate == 1.0 and report.tasks == 1


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


def test_baselines_persist_on_disk_one_file_per_batch(tmp_path: Path) -> None:
    """A restarted runner finds the baseline its predecessor wrote (nothing re-run), and a
    second batch gets its own file in the same directory."""
    directory = tmp_path / "cache" / "baselines"  # parents created on first use
    policy = ScriptedPolicy(["ACTION: open door"])

    def fresh() -> CanaryRunner:
        runtime = HarnessRuntime(SUITE, policy, Path("."), RunConfig())
        return CanaryRunner(
            runtime, lambda p, c: NoHooks(), validator, None, BaselineCache(directory)
        )

    first = fresh()
    key = first.baseline_key(BATCH)
    outcomes, cached = first.baseline(BATCH)
    assert not cached and DoorEnv.resets == 8
    assert sorted(p.name for p in directory.iterdir()) == [f"{key}.json"]
    assert json.loads((directory / f"{key}.json").read_text())[0] == {
        "task_id": "d0",
        "seed": 0,
        "success": True,
        "reward": 1.0,
        "tokens": 3,  # ACTION: open door
        "seconds": outcomes[0].seconds,
        "steps": 1,
        "faults": {},
        "effects": {},
        "origins": {"model": 1, "rewritten": 0, "forced": 0, "vetoed_then_model": 0},
    }
    restarted = fresh()
    for _ in range(2):  # from disk, then from memory
        assert restarted.baseline(BATCH) == (outcomes, True)
    assert DoorEnv.resets == 8
    one = CanaryBatch("door", TASKS[:1], (0,))
    assert restarted.baseline(one)[1] is False and DoorEnv.resets == 9
    names = sorted(p.name for p in directory.iterdir())
    assert names == sorted([f"{key}.json", f"{restarted.baseline_key(one)}.json"])


def test_flaky_resets_are_retried_not_counted_as_failed_episodes() -> None:
    """The first 3 resets fail (d0, d1, d2 of the baseline): they are re-run, so the baseline
    still wins every even task."""
    DoorEnv.fail_resets = 3
    canary = runner(ScriptedPolicy(["ACTION: open door"]))
    report = canary.evaluate(BATCH, [])
    assert report.baseline_success_rate == 0.5
    assert (DoorEnv.reset_calls, DoorEnv.resets) == (8 + 3, 8)


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


@dataclass(frozen=True)
class LocalModel:
    """The settings a local backend exposes (transformers_backend.TransformersPolicy)."""

    model_id: str = "m"
    version: str = "1"
    sampling: SamplingConfig = SamplingConfig(max_new_tokens=64)
    max_prompt_tokens: int = 3072
    max_batch: int = 8
    prefix_cache: object | None = None
    batched_decode: bool | None = None
    draft_tokens: int | None = None
    dtype: str | None = None


def test_generation_identity_reads_every_setting_that_changes_what_the_target_writes() -> None:
    local = LocalModel(prefix_cache=object(), batched_decode=True, draft_tokens=4, dtype="bfloat16")
    assert generation_identity(local) == {
        "sampling": {"temperature": 0.0, "top_p": 1.0, "max_new_tokens": 64},
        "max_prompt_tokens": 3072,
        "max_batch": 8,
        "prefix_cache": True,
        "batched_decode": True,
        "draft_tokens": 4,
        "dtype": "bfloat16",
    }
    assert generation_identity(ScriptedPolicy(["x"], max_batch=4)) == {
        "sampling": None,
        "max_prompt_tokens": None,
        "max_batch": 4,
        "prefix_cache": False,
        "batched_decode": None,
        "draft_tokens": None,
        "dtype": None,
    }
    # a backend without a setting reads as None (prefix reuse: off), never as an error
    assert generation_identity(object()) == {
        "sampling": None,
        "max_prompt_tokens": None,
        "max_batch": None,
        "prefix_cache": False,
        "batched_decode": None,
        "draft_tokens": None,
        "dtype": None,
    }

    def key(model: LocalModel) -> str:
        runtime = HarnessRuntime(SUITE, model, Path("."), RunConfig())  # type: ignore[arg-type]
        return CanaryRunner(runtime, lambda p, c: NoHooks(), validator).baseline_key(BATCH)

    same = key(LocalModel())
    assert key(LocalModel()) == same
    assert key(LocalModel(max_prompt_tokens=2048)) != same
    assert key(LocalModel(max_batch=4)) != same
    assert key(LocalModel(prefix_cache=object())) != same
    # the engine and the number format are part of how the target generates (issue 16)
    assert key(LocalModel(batched_decode=False)) != key(LocalModel(batched_decode=True))
    assert key(LocalModel(dtype="bfloat16")) != key(LocalModel(dtype="float32"))
    assert key(LocalModel(draft_tokens=4)) != key(LocalModel(draft_tokens=0))


def test_pairing_of_outcomes_of_another_length_is_refused() -> None:
    def outcome(task_id: str, seed: int) -> EpisodeOutcome:
        return EpisodeOutcome(task_id, seed, False, 0.0, 0, 0.0)

    from harness_r1.sandbox.canary import _check_pairing

    base = [outcome("d0", 0), outcome("d1", 1)]
    with pytest.raises(ValueError, match="zip"):
        _check_pairing(base, base[:1])
    with pytest.raises(
        InfraFailure,
        match="^canary pairing: baseline and patched outcomes are not the same tasks$",
    ):
        _check_pairing(base, base[::-1])


def test_a_batch_is_checked_with_a_message_that_says_what_is_wrong() -> None:
    # an empty batch used to run its (empty) baseline, then fail with ZeroDivisionError on the
    # first candidate's delta
    with pytest.raises(ValueError, match="^a canary batch needs at least one task$"):
        CanaryBatch("door", (), ())
    with pytest.raises(ValueError, match="^a canary batch needs one seed per task$"):
        CanaryBatch("door", TASKS, (1, 2))
    other = TaskSpec(env="dbbench", split="t", task_id="q", task_type="x", instruction="x")
    with pytest.raises(ValueError, match="^every task of a canary batch must belong to its env$"):
        CanaryBatch("door", (*TASKS[:1], other), (0, 1))


def test_the_control_id_is_reserved_while_the_control_runs() -> None:
    with pytest.raises(ValueError, match="not 'control'"):
        runner(ScriptedPolicy(["x"]), control=True).evaluate(BATCH, [Candidate("control", OPEN)])


# -- the incumbent as baseline (issue 17) ---------------------------------------------------

LOOK_FIRST = patch(
    "def hook(ctx, state):\n"
    "    if ctx['step'] == 0:\n"
    "        return {'effect': 'force', 'text': 'look'}\n"
    "    return None\n"
)


def test_a_patch_that_helps_only_on_top_of_the_incumbent_scores_against_the_incumbent() -> None:
    incumbent = Incumbent.of_chain("ov-open", [Link("ov-open", OPEN)])
    canary = runner(ScriptedPolicy(["ACTION: dance"]), control=True)
    alone = canary.evaluate(BATCH, [Candidate("look", LOOK_FIRST)])
    assert alone.incumbent_overlay_id == "base"
    assert alone.candidates[0].delta_success == 0.0  # looking alone never opens the door
    report = canary.evaluate(
        BATCH, [Candidate("look", LOOK_FIRST), Candidate("again", OPEN)], incumbent
    )
    assert report.incumbent_overlay_id == "ov-open"
    assert report.baseline_success_rate == pytest.approx(0.5) and not report.baseline_cached
    look, again = report.candidates
    # on top of "always open" (a newer force wins at step 0), every task is won: +0.5
    assert look.delta_success == pytest.approx(0.5) and look.reward == pytest.approx(0.5)
    assert look.patch_sha256 == LOOK_FIRST.sha256()
    assert look.composed_sha256 == incumbent.with_link("look", LOOK_FIRST).sha256()
    assert again.delta_success == 0.0  # a repeat of the incumbent adds nothing
    assert report.control is not None and report.control.delta_success == 0.0


def test_baselines_are_keyed_by_the_incumbent() -> None:
    canary = runner(ScriptedPolicy(["ACTION: dance"]))
    on_open = Incumbent.of_chain("ov-open", [Link("ov-open", OPEN)])
    on_look = Incumbent.of_chain("ov-look", [Link("ov-look", LOOK_THEN_OPEN)])
    keys = {canary.baseline_key(BATCH, i) for i in (BASE, on_open, on_look)}
    assert len(keys) == 3
    assert canary.baseline(BATCH, on_open)[0] != canary.baseline(BATCH, on_look)[0]
    assert canary.baseline(BATCH, on_open)[1]  # the second ask is the cached one


def test_a_candidate_that_cannot_compose_onto_the_incumbent_is_invalid_with_the_reason() -> None:
    removal = Patch(env="door", hooks=[HookCode(hook=HookName.POST_FEEDBACK, mode="remove")])
    incumbent = Incumbent.of_chain("ov-open", [Link("ov-open", OPEN)])
    canary = runner(ScriptedPolicy(["ACTION: dance"]), invalid_reward=-0.5)
    [result] = canary.evaluate(BATCH, [Candidate("rm", removal)], incumbent).candidates
    assert result.status == "invalid" and result.reward == -0.5
    assert result.invalid_reason is not None
    assert result.invalid_reason.startswith("composition_nothing_to_remove: post_feedback")


SLOW = patch(
    "def hook(ctx, state):\n"
    "    n = int('1' + '0' * 8)\n"
    "    t = 0\n"
    "    for i in range(n):\n"
    "        t += i\n"
    "    return None\n"
)


def test_a_candidate_that_times_out_every_call_is_disabled_and_the_others_finish() -> None:
    """The per-overlay budget: after `max_worker_kills` the slow candidate's hook set answers
    `disabled` at once, so the lockstep episodes of the other candidates are not held up by a
    kill and a restart per call; the slow one is invalid with a reason the engineer can use."""
    policy = ScriptedPolicy(["ACTION: dance"])
    runtime = HarnessRuntime(SUITE, policy, Path("."), RunConfig(lockstep=32))
    sandbox = SandboxConfig(call_budget_s=0.3, max_worker_kills=3)

    def factory(p: Patch, candidate_id: str) -> HookSet:
        return IsolatedHooks(p, sandbox, overlay_id=candidate_id)

    canary = CanaryRunner(runtime, factory, validator, CanaryConfig(), BaselineCache())
    started = time.perf_counter()
    report = canary.evaluate(BATCH, [Candidate("slow", SLOW), Candidate("open", OPEN)])
    elapsed = time.perf_counter() - started
    by_id = {c.candidate_id: c for c in report.candidates}
    slow = by_id["slow"]
    assert slow.status == "invalid" and slow.reward == 0.0
    assert slow.invalid_reason is not None and slow.invalid_reason.startswith(
        "hook_budget: disabled after 3 timeouts"
    )
    assert slow.sandbox_events["timeout"] == 3 and slow.sandbox_events["disabled"] >= 1
    assert by_id["open"].status == "evaluated" and by_id["open"].delta_success == 0.5
    # 3 timed-out calls (0.3 s each, plus the kill and restart), not one per step of 8 episodes
    assert elapsed < 3 * (0.3 + 1.0) + 5.0, elapsed


BUSY = patch(
    "def hook(ctx, state):\n"
    "    n = int('4' + '0' * 6)\n"
    "    t = 0\n"
    "    for i in range(n):\n"
    "        t += i\n"
    "    return {'effect': 'force', 'text': 'open door'} if ctx['step'] >= 3 else None\n"
)


def test_a_candidate_that_spends_the_episode_hook_budget_is_invalid() -> None:
    """Every call inside the per-call budget, but together over the episode's hook time: the
    episodes finish without the patch after that (one `over_budget` fault each) and the
    candidate is invalid, not credited or blamed for episodes it ran only partly."""
    policy = ScriptedPolicy(["ACTION: dance"])
    run = RunConfig(lockstep=32, hook_budget_s=0.12)  # ~0.1 s a call here
    runtime = HarnessRuntime(SUITE, policy, Path("."), run)
    sandbox = SandboxConfig(call_budget_s=3.0)

    def factory(p: Patch, candidate_id: str) -> HookSet:
        return IsolatedHooks(p, sandbox, overlay_id=candidate_id)

    canary = CanaryRunner(runtime, factory, validator, CanaryConfig(), BaselineCache())
    report = canary.evaluate(BATCH, [Candidate("busy", BUSY), Candidate("open", OPEN)])
    by_id = {c.candidate_id: c for c in report.candidates}
    busy = by_id["busy"]
    assert busy.status == "invalid", busy
    assert busy.invalid_reason is not None
    assert busy.invalid_reason.startswith("hook_budget: the hooks spent an episode's hook time")
    assert busy.sandbox_events["over_budget"] == 8  # once per episode, never more
    assert by_id["open"].status == "evaluated" and by_id["open"].delta_success == 0.5


def test_the_advisory_profile_rejects_a_solver_with_its_figures_and_promotes_advice() -> None:
    """The gate's attribution limits on a real canary run (the scripted policy is the stand-in
    for a model that acts on what it reads): the forcing patch is rejected with its forced
    share, or its patch-alone success, and the limit in the reason, its reward is the refusal's;
    the note that the model acts on is promoted and keeps its delta as reward."""
    from harness_r1.sandbox.gate import ADVISORY_LIMITS, GateConfig
    from harness_r1.sandbox.gated import run_gated
    from harness_r1.trainer.shaping import InvalidRewardShape

    reader = ScriptedPolicy(
        lambda messages: "ACTION: open door" if "open door" in messages[-1]["content"] else "x"
    )
    canary = runner(reader, patch_alone=True)
    candidates = [Candidate("open", OPEN), Candidate("advice", ADVICE)]
    advisory = GateConfig(min_batch_tasks=1, min_guard_tasks=0, **ADVISORY_LIMITS)
    gated = run_gated(canary, BATCH, None, candidates, advisory)
    solver, advice = gated.decisions["open"], gated.decisions["advice"]
    assert solver.verdict == "reject" and not solver.promote
    assert "forced 1.00 of the steps (8 of 8)" in solver.reasons[0]
    assert "the limit is 0.10 (gate.max_forced_share)" in solver.reasons[0]
    assert advice.promote and advice.verdict == "promote"

    alone_only = GateConfig(min_batch_tasks=1, min_guard_tasks=0, max_patch_alone_success=0.0)
    gated = run_gated(canary, BATCH, None, candidates, alone_only)
    reason = gated.decisions["open"].reasons[0]
    assert "the harness alone solved 4 of 8 tasks (0.50) under the null policy" in reason
    assert "(gate.max_patch_alone_success)" in reason and gated.decisions["advice"].promote

    by_id = {r.candidate_id: r for r in gated.report.candidates}
    shape = InvalidRewardShape(-0.25, attribution=advisory)
    assert shape.of_result(by_id["open"]) == -0.25  # not its +0.5 delta
    assert shape.of_result(by_id["advice"]) == pytest.approx(0.5)
    assert InvalidRewardShape(-0.25).of_result(by_id["open"]) == pytest.approx(0.5)  # default


def test_the_advisory_gate_refuses_a_candidate_whose_control_did_not_run() -> None:
    canary = runner(ScriptedPolicy(["x"]), patch_alone=False)
    from harness_r1.sandbox.gate import ADVISORY_LIMITS, GateConfig
    from harness_r1.sandbox.gated import run_gated

    advisory = GateConfig(min_batch_tasks=1, min_guard_tasks=0, **ADVISORY_LIMITS)
    gated = run_gated(canary, BATCH, None, [Candidate("advice", ADVICE)], advisory)
    assert "patch-alone control did not run" in gated.decisions["advice"].reasons[0]


def test_the_guard_run_has_no_patch_alone_control() -> None:
    """The control answers for the batch; the guard set asks only about regressions, so the
    gate's guard run spends no episodes on it."""
    from harness_r1.sandbox.gate import GateConfig
    from harness_r1.sandbox.gated import run_gated

    canary = runner(ScriptedPolicy(["x"]), patch_alone=True)
    guard_batch = CanaryBatch("door", TASKS[:4], (100, 101, 102, 103))
    gate = GateConfig(min_batch_tasks=1, min_guard_tasks=0)
    gated = run_gated(canary, BATCH, guard_batch, [Candidate("advice", ADVICE)], gate)
    assert gated.report.candidates[0].patch_alone is not None
    assert gated.guard is not None and gated.guard.candidates[0].patch_alone is None
    # batch: baseline, candidate, its control (8 each); guard: baseline, candidate (4 each)
    assert DoorEnv.resets == 3 * 8 + 2 * 4
