"""The canary runner's verdict on candidates, on a tiny in-test env (canary_rig.py) with real
isolated hook workers running the candidate patches: paired deltas against a shared baseline,
the invalid reward, what the episodes cost (n + kn, identical candidates run once), each pair's
own outcome, an env error the patch caused, hook budgets that make a candidate invalid, the
whole report field by field, and the checks on a batch and on candidate ids.

The baseline (its key, cache, cost, pairing and the incumbent under it) is in
test_canary_baseline.py; infrastructure failures in test_canary_infrastructure.py; the control
runs and the gate's attribution limits in test_canary_controls.py."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from canary_rig import (
    BATCH,
    HOSTILE,
    LOOK_THEN_OPEN,
    OPEN,
    RAISING,
    SUITE,
    TASKS,
    DoorEnv,
    patch,
    runner,
    validator,
)

from harness_r1.contracts import (
    CanaryReport,
    CandidateCost,
    CandidateResult,
    HookName,
    OriginCounts,
    PairedTask,
    Patch,
    TargetRef,
    TaskSpec,
    Trajectory,
)
from harness_r1.harness import EpisodeSpec, HarnessRuntime, HookSet, RunConfig
from harness_r1.harness.policies import ScriptedPolicy
from harness_r1.sandbox.canary import (
    BaselineCache,
    CanaryBatch,
    CanaryConfig,
    CanaryRunner,
    Candidate,
)
from harness_r1.sandbox.executor import IsolatedHooks
from harness_r1.sandbox.gate import PairedOutcome, bootstrap_delta_interval
from harness_r1.sandbox.sandbox_config import SandboxConfig

pytestmark = pytest.mark.usefixtures("door_env_reset")


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


def test_episodes_cost_n_plus_kn_not_2kn(dancing_canary: CanaryRunner) -> None:
    distinct = [OPEN.model_copy(update={"description": f"open, take {i}"}) for i in range(4)]
    report = dancing_canary.evaluate(BATCH, [Candidate(f"c{i}", p) for i, p in enumerate(distinct)])
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


def test_identical_candidates_run_once_and_are_judged_alike(dancing_canary: CanaryRunner) -> None:
    """K samples that agree (an engineer that has learnt its patch) cost one candidate's
    episodes; each keeps its own id, and the ones that did not run report no cost."""
    candidates = [Candidate("a", OPEN), Candidate("b", LOOK_THEN_OPEN), Candidate("c", OPEN)]
    report = dancing_canary.evaluate(BATCH, [*candidates, Candidate("d", OPEN)])
    assert DoorEnv.resets == 8 + 2 * 8  # the baseline, OPEN once, LOOK_THEN_OPEN once
    by_id = {c.candidate_id: c for c in report.candidates}
    assert [c.candidate_id for c in report.candidates] == ["a", "b", "c", "d"]
    for twin in ("c", "d"):
        assert by_id[twin].delta_success == by_id["a"].delta_success == pytest.approx(0.5)
        assert by_id[twin].pairs == by_id["a"].pairs
        assert by_id[twin].cost.episodes == 0 and by_id[twin].patch_sha256 == OPEN.sha256()
    assert by_id["a"].cost.episodes == 8 and by_id["b"].delta_success == pytest.approx(1.0)


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


def test_candidate_ids_must_be_unique() -> None:
    with pytest.raises(ValueError, match="unique"):
        runner(ScriptedPolicy(["x"])).evaluate(BATCH, [Candidate("a", OPEN), Candidate("a", OPEN)])


def test_batch_must_be_consistent() -> None:
    with pytest.raises(ValueError):
        CanaryBatch("door", TASKS, (1, 2))


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
