"""Sandbox and canary costs, each measured against its baseline in the same run.

1. Round trip of a trivial hook call: isolated warm worker vs an in-process call (p50/p99).
2. Canary for K candidates: shared cached baseline + candidates batched together, vs the naive
   design (a baseline run per candidate, candidates one after another): episodes and seconds.

    .venv/bin/python benchmarks/sandbox_costs.py --calls 2000 --env dbbench --split dev \
        --tasks 8 --max-steps 4 --k 4
"""

from __future__ import annotations

import argparse
import statistics
import time

from harness_r1.contracts import HookCode, HookName, Patch
from harness_r1.daemon.settings import Settings
from harness_r1.envs import get_suite
from harness_r1.harness import HarnessRuntime, HookSet, InProcessHooks, RunConfig, spread
from harness_r1.models import SamplingConfig, TransformersPolicy
from harness_r1.sandbox import (
    BaselineCache,
    CanaryBatch,
    CanaryRunner,
    Candidate,
    IsolatedHooks,
    SandboxConfig,
    check_patch,
    hook_globals,
    reference_patches,
)

TRIVIAL = "def hook(ctx, state):\n    state['n'] = state.get('n', 0) + 1\n    return None\n"


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def round_trip(calls: int) -> None:
    ctx = {
        "step": 1,
        "observation": "You arrive at countertop 1." * 4,
        "admissible_actions": ["look"] * 40,
    }
    namespace = hook_globals()
    exec(compile(TRIVIAL, "hook", "exec"), namespace)  # trusted benchmark code
    in_process = InProcessHooks("bench", {HookName.PRE_ACTION: namespace["hook"]})
    patch = Patch(env="any", hooks=[HookCode(hook=HookName.PRE_ACTION, code=TRIVIAL)])
    isolated = IsolatedHooks(patch, SandboxConfig())
    results = {}
    for name, hooks in (("in-process", in_process), ("isolated worker", isolated)):
        samples = []
        for _ in range(calls):
            started = time.perf_counter()
            result = hooks.call(HookName.PRE_ACTION, ctx, {})
            samples.append(time.perf_counter() - started)
            assert result.fault is None, result
        results[name] = percentiles(samples)
    isolated.close()
    print(f"\n### Hook call round trip ({calls} calls, same hook and ctx)\n")
    print("| executor | p50 | p99 |\n| --- | --- | --- |")
    for name, (p50, p99) in results.items():
        print(f"| {name} | {p50 * 1e6:.0f} us | {p99 * 1e6:.0f} us |")
    ratio = results["isolated worker"][0] / results["in-process"][0]
    print(f"\nisolated / in-process p50: x{ratio:.1f} (isolated: {isolated.isolated})")


def canary_costs(env: str, split: str, tasks: int, max_steps: int, k: int) -> None:
    root = Settings().data_root()
    suite = get_suite(env)
    batch_tasks = spread(suite.load_tasks(root, split), tasks)
    batch = CanaryBatch(env, tuple(batch_tasks), tuple(range(len(batch_tasks))))
    policy = TransformersPolicy.embedded(sampling=SamplingConfig(max_new_tokens=48), max_batch=8)
    runtime = HarnessRuntime(suite, policy, root, RunConfig(max_steps=max_steps, history_turns=3))
    reference = list(reference_patches(env).values())[0]
    # the same code under K descriptions: the canary runs identical overlays once, and this
    # compares K candidates' episodes, each run, against the naive design
    candidates = [
        Candidate(f"c{i}", reference.model_copy(update={"description": f"copy {i}"}))
        for i in range(k)
    ]

    def factory(patch: Patch, candidate_id: str) -> HookSet:
        return IsolatedHooks(patch, SandboxConfig(), overlay_id=candidate_id)

    def valid(patch: Patch) -> str | None:
        return None if check_patch(patch).ok else "invalid"

    rows = []
    started = time.perf_counter()
    shared = CanaryRunner(runtime, factory, valid, cache=BaselineCache()).evaluate(
        batch, candidates
    )
    shared_s = time.perf_counter() - started
    shared_eps = shared.baseline_cost.episodes + sum(c.cost.episodes for c in shared.candidates)
    rows.append(("shared baseline, candidates batched", shared_eps, shared_s))
    started = time.perf_counter()
    naive_eps = 0
    for candidate in candidates:  # naive: a baseline per candidate, one candidate at a time
        report = CanaryRunner(runtime, factory, valid, cache=BaselineCache()).evaluate(
            batch, [candidate]
        )
        naive_eps += report.baseline_cost.episodes + report.candidates[0].cost.episodes
    naive_s = time.perf_counter() - started
    rows.append(("naive 2K runs", naive_eps, naive_s))
    runtime.close()
    print(
        f"\n### Canary cost, K={k}, {env}/{split}, {tasks} tasks, max {max_steps} steps, SmolLM2\n"
    )
    print("| design | episodes | seconds |\n| --- | --- | --- |")
    for name, eps, secs in rows:
        print(f"| {name} | {eps} | {secs:.1f} |")
    eps_ratio, secs_ratio = naive_eps / shared_eps, naive_s / shared_s
    print(f"\nnaive / shared: episodes x{eps_ratio:.2f}, seconds x{secs_ratio:.2f}")
    deltas = [c.delta_success for c in shared.candidates]
    spread_ = statistics.pstdev(d or 0 for d in deltas)
    print(f"(candidate deltas, the same code run K times: {deltas}; stdev {spread_:.3f})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--env", default="dbbench")
    parser.add_argument("--split", default="dev")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--skip-canary", action="store_true")
    args = parser.parse_args()
    round_trip(args.calls)
    if not args.skip_canary:
        canary_costs(args.env, args.split, args.tasks, args.max_steps, args.k)


if __name__ == "__main__":
    main()
