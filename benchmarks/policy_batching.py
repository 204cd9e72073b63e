"""Episodes/s and generated tokens/s of the transformers backend: 8 episodes in lockstep
(one batched generate per decision round) vs the same 8 episodes one by one, in one run.

    .venv/bin/python benchmarks/policy_batching.py --env alfworld --split valid_seen \
        --episodes 8 --max-steps 5
"""

from __future__ import annotations

import argparse
import time

from harness_r1.daemon.settings import Settings
from harness_r1.envs import get_suite
from harness_r1.harness import EpisodeSpec, HarnessRuntime, NoHooks, RunConfig
from harness_r1.harness.policies.base import SamplingConfig
from harness_r1.harness.policies.transformers_backend import TransformersPolicy
from harness_r1.harness.tasks import spread


def measure(
    policy: TransformersPolicy, env: str, split: str, episodes: int, max_steps: int, lockstep: int
) -> dict[str, float]:
    root = Settings().data_root()
    suite = get_suite(env)
    tasks = spread(suite.load_tasks(root, split), episodes)
    runtime = HarnessRuntime(suite, policy, root, RunConfig(max_steps=max_steps, lockstep=lockstep))
    specs = [EpisodeSpec(task=t, seed=i, hooks=NoHooks()) for i, t in enumerate(tasks)]
    tokens_before = policy.generated_tokens
    started = time.perf_counter()
    trajectories = runtime.run(specs)
    seconds = time.perf_counter() - started
    runtime.close()
    tokens = policy.generated_tokens - tokens_before
    steps = sum(t.outcome.steps for t in trajectories)
    return {
        "seconds": seconds,
        "episodes_per_s": len(trajectories) / seconds,
        "steps": steps,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", default="alfworld")
    parser.add_argument("--split", default="valid_seen")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args()
    policy = TransformersPolicy.embedded(
        sampling=SamplingConfig(max_new_tokens=args.max_new_tokens), max_batch=args.episodes
    )
    one = measure(policy, args.env, args.split, args.episodes, args.max_steps, lockstep=1)
    batched = measure(
        policy, args.env, args.split, args.episodes, args.max_steps, lockstep=args.episodes
    )
    print("| mode | episodes | steps | seconds | episodes/s | gen tokens | tokens/s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, r in (("one by one", one), (f"lockstep {args.episodes}", batched)):
        print(
            f"| {name} | {args.episodes} | {r['steps']} | {r['seconds']:.1f} "
            f"| {r['episodes_per_s']:.3f} | {r['tokens']} | {r['tokens_per_s']:.1f} |"
        )
    episodes_ratio = batched["episodes_per_s"] / one["episodes_per_s"]
    tokens_ratio = batched["tokens_per_s"] / one["tokens_per_s"]
    print(f"\nlockstep / one-by-one: episodes/s x{episodes_ratio:.2f}", end="")
    print(f", tokens/s x{tokens_ratio:.2f}")


if __name__ == "__main__":
    main()
